"""hold_idle_batch: a batch that only moves the resolved-ts waits for the idle interval; any
batch with a transaction, a piece or the target-ts runs at once."""

from __future__ import annotations

from sparkcdc.model import tso
from sparkcdc.pipeline.idle_batches import hold_idle_batch
from sparkcdc.pipeline.source import BatchOffset

START_MS = 1_700_000_000_000


def at(ms: int, piece: int = 0) -> BatchOffset:
    return BatchOffset(tso.compose(START_MS + ms), piece)


class Index:
    def __init__(self, *commit_ms: int):
        self.commits = [at(ms).ts for ms in commit_ms]

    def txns_between(self, lo_exclusive: int, hi_inclusive: int) -> list[int]:
        return [ts for ts in self.commits if lo_exclusive < ts <= hi_inclusive]


def test_resolved_ts_only_waits_for_the_idle_interval():
    assert hold_idle_batch(Index(), at(0), at(250), 1000) == at(0)
    assert hold_idle_batch(Index(), at(0), at(999), 1000) == at(0)
    assert hold_idle_batch(Index(), at(0), at(1000), 1000) == at(1000)


def test_a_transaction_runs_at_once():
    assert hold_idle_batch(Index(100), at(0), at(250), 1000) == at(250)
    assert hold_idle_batch(Index(250), at(0), at(250), 1000) == at(250)  # (start, end] holds its end
    assert hold_idle_batch(Index(0), at(0), at(250), 1000) == at(0)  # but not its start


def test_pieces_target_and_nothing_new_are_left_alone():
    assert hold_idle_batch(Index(), at(0), at(250, piece=2), 1000) == at(250, piece=2)
    assert hold_idle_batch(Index(), at(0, piece=1), at(250), 1000) == at(250)
    assert hold_idle_batch(Index(), at(0), at(250), 1000, target_ts=at(250).ts) == at(250)
    assert hold_idle_batch(Index(), at(0), at(0), 1000) == at(0)
