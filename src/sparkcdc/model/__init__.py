"""Plain data shared by every stage: commit-ts, binlog positions, table info, events."""
