"""The SQLite adapters of the embedded default: one file per concern, the same names as the MySQL and
Redis packages (db, schema, packets, ledger, lists, state, push)."""
