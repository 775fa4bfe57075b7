"""The MySQL/TiDB sink: TiCDC's SQL, conflict detection and safe mode against a MySQL-compatible
downstream (`mysql://`, `mysql+ssl://`, `tidb://`, `tidb+ssl://`)."""
