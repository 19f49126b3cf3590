"""The MySQL/MariaDB adapters of the production money backend: the sharded layout's pools (db), the
schema (``hongbao migrate``), and one file per concern, named as in the SQLite package."""
