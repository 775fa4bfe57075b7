"""Which tables and events a changefeed replicates."""
