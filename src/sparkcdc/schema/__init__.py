"""The schema store: DDL parsing and classification into TiCDC's DDL types, the allow list and
rename rules, and table definitions versioned by commit-ts. Plain Python, no Spark."""
