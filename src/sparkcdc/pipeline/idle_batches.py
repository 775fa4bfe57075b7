"""When a micro-batch that only moves an idle changefeed's checkpoint is worth running.

A batch with no transaction still costs a Spark micro-batch (~150-250 ms of driver and JVM time
on 2 cores, docs/benchmarks.md), so the trigger interval is also the idle cost: a shorter trigger
(lower latency under light load) would run one such batch per interval. The source's
`latestOffset` can pass its planned end through `hold_idle_batch`: a batch with transactions
runs at the next trigger, a batch that only moves the resolved-ts waits until that has moved
`idle_interval_ms` past the batch start. The idle checkpoint lag then stays within
idle_interval_ms + one batch whatever the trigger.

Not wired yet: pipeline/source.py (BinlogStreamReader.latestOffset) and the Spark Connect loop
would call it with the planned end.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from sparkcdc.model import tso
from sparkcdc.pipeline.source import BatchOffset


class _Transactions(Protocol):
    def txns_between(self, lo_exclusive: int, hi_inclusive: int) -> Sequence: ...


def hold_idle_batch(index: _Transactions, start: BatchOffset, end: BatchOffset, idle_interval_ms: int,
                    target_ts: int = 0) -> BatchOffset:
    """`end`, or `start` (no batch now) when (start, end] holds no transaction, does not reach
    `target_ts` and moves the resolved-ts by less than `idle_interval_ms`."""
    if end.key() <= start.key() or start.piece or end.piece:
        return end  # nothing new, or inside a split transaction: rows to read
    if target_ts and end.ts >= target_ts:
        return end  # the changefeed finishes with this batch
    if index.txns_between(start.checkpoint_ts, end.ts):
        return end  # DDLs are transactions of the index too
    if tso.physical_ms(end.ts) - tso.physical_ms(start.checkpoint_ts) >= idle_interval_ms:
        return end
    return start
