"""The redo log of MySQL-sink changefeeds (`[consistent] level = "eventual"`, docs/redo.md).

Every micro-batch's rows and DDLs are written durably to the redo storage before the sink
applies any of them; `sparkcdc redo apply` replays the log into the downstream after a disaster,
bringing it to the upstream's state at the redo resolved-ts.

    storage.py  where the log lives: one fsspec root (file, s3, gcs, azblob)
    format.py   the frame format of log files and the meta file
    writer.py   the changefeed side: per-batch frames, meta, cleanup
    reader.py   the apply side: complete batches, de-duplicated, in commit order
    applier.py  replaying into a MySQL sink: ts range, update split, DDL barriers
"""
