"""TiDB-TSO-compatible commit timestamps: `(physical_ms << 18) | logical`."""

from __future__ import annotations

import datetime as _dt

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def compose(physical_ms: int, logical: int = 0) -> int:
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical part {logical} out of range [0, {LOGICAL_MASK}]")
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    return ts & LOGICAL_MASK


def to_datetime(ts: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(physical_ms(ts) / 1000.0, tz=_dt.timezone.utc)


def format_time(ts: int) -> str:
    """Human time of a TSO as TiCDC's CLI prints it (`2006-01-02 15:04:05.000`, UTC)."""
    return to_datetime(ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def next_after(previous: int, event_seconds: int) -> int:
    """The commit-ts of a transaction whose binlog event time is `event_seconds`.

    At least `previous` + 2 (the last commit-ts or resolved-ts handed out for this upstream), and
    as close to the event time as that allows. So `previous` + 1 is never a transaction's: every
    gap between two transactions, or between a resolved-ts and the next transaction, holds a
    commit-ts of its own, where the snapshot places a chunk read at that binlog position
    (`free_slot_after`, pipeline/snapshot.py).
    """
    candidate = compose(event_seconds * 1000, 0)
    return candidate if candidate > previous + 1 else previous + 2


def free_slot_after(ts: int) -> int:
    """The commit-ts just after `ts` (a commit-ts or resolved-ts of the puller): no transaction
    has it (next_after), so rows given it sort after everything at or before `ts` and before the
    next transaction."""
    return ts + 1
