"""Spark: the binlog source (planning, transport, read tasks), the batch writer, the changefeed runner, the Spark Connect loop and the session."""
