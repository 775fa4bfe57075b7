"""The upstream MySQL/MariaDB: connection, preflight checks, binlog puller and range reader."""
