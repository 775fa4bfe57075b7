"""The capture: its changefeeds, the metadata stores (SQLite, etcd), owner election, scheduling and fencing."""
