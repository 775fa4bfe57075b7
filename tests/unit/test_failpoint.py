"""Failpoints (sparkcdc.failpoint): nothing unless armed, armed only by SPARKCDC_FAILPOINTS at start
(with a warning) or by a test in its process, and the batch writer's points sit in its one write
order without changing it."""

from __future__ import annotations

import logging

import pytest

from sparkcdc import failpoint
from sparkcdc.errors import ErrInvalidFailpoint
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.pipeline import batch_sink, runner
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.snapshot import SNAPSHOT_WAVE_PAUSE
from sparkcdc.sink.lakehouse.sink import KILL_AFTER_LAKE_COMMIT

from test_pipeline_planning import RecordingSink
from test_redo import RecordingRedo, two_table_batch


def test_every_point_the_code_names_is_declared_and_every_declared_point_is_used():
    named = {batch_sink.KILL_AFTER_FIRST_TABLE, batch_sink.KILL_AFTER_DDL, runner.STUCK_DURATION_FAILPOINT,
             runner.SYNC_POINT_INTERVAL_FAILPOINT, KILL_AFTER_LAKE_COMMIT, batch_sink.PAUSE_INSIDE_TRANSACTION,
             SNAPSHOT_WAVE_PAUSE}
    assert named == set(failpoint.POINTS)


def test_points_do_nothing_unless_armed():
    assert all(failpoint.value(name) is None for name in failpoint.POINTS)
    with failpoint.enabled("sync-point-interval", "2s"):
        assert failpoint.value("sync-point-interval") == "2s"
    assert failpoint.value("sync-point-interval") is None


def test_the_environment_switch_arms_the_points_it_names_and_warns(caplog):
    text = "kill-after-ddl=return(ADD COLUMN c; not a separator) ; sync-point-interval=return(2s)"
    with pytest.raises(ErrInvalidFailpoint):  # a ';' inside a value ends the entry: refused, not guessed
        failpoint.arm_from_environment({failpoint.ENV: text})
    try:
        with caplog.at_level(logging.WARNING, logger="sparkcdc.failpoint"):
            armed = failpoint.arm_from_environment({failpoint.ENV: "kill-after-ddl=return(ADD COLUMN c);"
                                                                   " sync-point-interval=return(2s)"})
        assert armed == {"kill-after-ddl": "ADD COLUMN c", "sync-point-interval": "2s"}
        assert failpoint.value("kill-after-ddl") == "ADD COLUMN c"
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2 and all("FAILPOINT ARMED" in w and "never set it in production" in w
                                          for w in warnings)
    finally:
        failpoint.arm_from_environment({})
    assert failpoint.value("kill-after-ddl") is None


@pytest.mark.parametrize("text", ["kill-after-dll=return(x)", "kill-after-ddl=x", "kill-after-ddl", "=return(1)"])
def test_a_bad_entry_is_refused_naming_the_points(text):
    with pytest.raises(ErrInvalidFailpoint, match="kill-after-first-table, kill-after-ddl"):
        failpoint.parse(text)


def redo_batch_calls(monkeypatch, armed: str | None) -> list:
    """The sink's and the redo log's calls for a batch of three transactions over two tables, in
    redo pieces of about 4 rows; `kill-after-first-table` armed with `armed` (killing raises)."""
    def kill(name, where):
        calls.append(("killed", name))
        raise SystemExit(where)

    monkeypatch.setattr(failpoint, "kill_process_group", kill)
    monkeypatch.setattr(batch_sink, "REDO_PIECE_ROWS", 4)
    _, table, index = two_table_batch((10, 20, 30))
    sink = RecordingSink()
    calls = sink.calls
    try:
        if armed is None:
            write_batch(table, index, sink, TableFilter(["*.*"]).match_event, lambda ts: None,
                        redo=RecordingRedo(calls))
        else:
            with failpoint.enabled(batch_sink.KILL_AFTER_FIRST_TABLE, armed):
                write_batch(table, index, sink, TableFilter(["*.*"]).match_event, lambda ts: None,
                            redo=RecordingRedo(calls))
    except SystemExit:
        pass
    return calls


def test_kill_after_first_table_fires_inside_the_one_write_order(monkeypatch):
    plain = redo_batch_calls(monkeypatch, None)
    # Armed for a table the batch does not have, the point changes nothing.
    assert redo_batch_calls(monkeypatch, "absent") == plain
    killed = redo_batch_calls(monkeypatch, "u")
    # It dies where the plain run had written the first piece's first table: everything before is
    # the same calls in the same order, then that table is flushed downstream.
    first_rows = next(i for i, call in enumerate(plain) if call[0] == "rows")
    assert killed[:first_rows + 1] == plain[:first_rows + 1]
    assert plain[first_rows][1] == "t"
    assert killed[first_rows + 1:] == [("flush",), ("killed", "kill-after-first-table")]
