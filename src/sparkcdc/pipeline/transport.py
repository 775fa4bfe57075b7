"""How the change batches cross Spark between the read tasks and foreachBatch.

A read task yields each change batch (model/change_batch.py, CHANGE_SCHEMA) packed as one binary
value, its Arrow IPC stream (SPARK_SCHEMA, `pack_batch`), and foreachBatch unpacks what
`toArrow()` returns (`unpack_changes`). Spark's own rows would convert every value twice (Arrow
to UnsafeRow in the scan, back to Arrow in toArrow), and tuples would go through PySpark's
per-value Python conversion.

With local executors (a `local` master: they share the driver's filesystem), a read task instead
writes its range's batches as one Arrow IPC file in the changefeed's spool directory
(`SourceOptions.spool_dir`) and yields only the file's path (`spool_batches`); the driver maps the
file and removes it (`unpack_changes`). Even packed, a 32 MB batch crossed the JVM five times
(the worker's socket, the scan's row, toArrow's Arrow batch, the task result, the driver's socket)
and made the serial collector run full collections: 0.35-0.5 s from the last read to toArrow's
return, against 0.02-0.06 s through the file (docs/benchmarks.md). Spark still plans, schedules
and retries the read tasks; a failed task's file is left over until the changefeed's next
(re)start or stop empties the directory.
"""

from __future__ import annotations

import array
import os
import uuid
from typing import Iterator

import pyarrow as pa

from sparkcdc.model.change_batch import CHANGE_SCHEMA

# What Spark carries (source.SPARK_SCHEMA): one row per record batch of CHANGE_SCHEMA, as an Arrow
# IPC stream. Spark copies a few large values per batch instead of converting every value: a 32 MB
# batch's toArrow() took half the time and half the JVM CPU (docs/benchmarks.md).
_PACKED_SCHEMA = pa.schema([("changes", pa.binary())])
# A packed value that names a spooled file rather than holding the batch: an Arrow IPC stream
# starts with its continuation marker (0xFFFFFFFF), never with these bytes.
_SPOOLED_PREFIX = b"sparkcdc-spooled:"


def pack_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` (CHANGE_SCHEMA) as the one row of a SPARK_SCHEMA batch: its Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return _packed_value(sink.getvalue())


def spool_batches(batches: Iterator[pa.RecordBatch], spool_dir: str) -> pa.RecordBatch:
    """Write `batches` (CHANGE_SCHEMA) as one Arrow IPC stream file in `spool_dir`, named for
    this call alone (a retried task writes its own); the one row of a SPARK_SCHEMA batch that
    names it."""
    path = os.path.join(spool_dir, f"{uuid.uuid4().hex}.arrows")
    with pa.OSFile(path, "wb") as file, pa.ipc.new_stream(file, CHANGE_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return _packed_value(pa.py_buffer(_SPOOLED_PREFIX + os.fsencode(path)))


def _packed_value(value: pa.Buffer) -> pa.RecordBatch:
    offsets = pa.py_buffer(array.array("i", [0, value.size]).tobytes())
    return pa.RecordBatch.from_arrays([pa.Array.from_buffers(pa.binary(), 1, [None, offsets, value])],
                                      schema=_PACKED_SCHEMA)


def unpack_changes(table: pa.Table) -> pa.Table:
    """The CHANGE_SCHEMA rows of a SPARK_SCHEMA table (a foreachBatch DataFrame's toArrow()),
    batch by batch in the order Spark returned them; the Arrow buffers are not copied. A
    spooled file is memory-mapped and removed at once: its pages live as long as the rows."""
    batches = []
    for chunk in table.column(0).chunks:
        for index in range(len(chunk)):
            value = chunk[index].as_buffer()
            if value.size >= len(_SPOOLED_PREFIX) and value[:len(_SPOOLED_PREFIX)] == _SPOOLED_PREFIX:
                path = os.fsdecode(value[len(_SPOOLED_PREFIX):].to_pybytes())
                source = pa.memory_map(path)
                os.unlink(path)
                batches.extend(pa.ipc.open_stream(source))
            else:
                batches.extend(pa.ipc.open_stream(value))
    return pa.Table.from_batches(batches, schema=CHANGE_SCHEMA)
