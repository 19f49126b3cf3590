"""Adapters behind the ports of hongbao.core.ports: the embedded default (SQLite + in-process)
and, with the production issue, MySQL/MariaDB and Redis."""
