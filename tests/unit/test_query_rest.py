"""Stopping a changefeed brings its query to rest first (query_rest.py): the source plans
no batch while the hold file exists, and the stop waits until Spark reports that it found nothing
to do, so the interrupt of StreamingQuery.stop() never lands in a batch or a starting source."""

from __future__ import annotations

import os

from sparkcdc.pipeline import query_rest
from sparkcdc.pipeline.stream_reader import BinlogStreamReader
from sparkcdc.pipeline.planning import SourceOptions


class _Query:
    """A StreamingQuery whose status moves on at each read, as a starting query's does."""

    name = "changefeed-default-cf"

    def __init__(self, hold_file: str, statuses: list[dict]):
        self._hold_file = hold_file
        self._statuses = statuses
        self.reads = 0
        self.isActive = True

    @property
    def status(self) -> dict:
        assert os.path.exists(self._hold_file), "the source is held before the stop waits"
        self.reads += 1
        return self._statuses[min(self.reads, len(self._statuses)) - 1]


def _status(message: str, data: bool = False) -> dict:
    return {"message": message, "isDataAvailable": data, "isTriggerActive": False}


def test_stop_waits_until_the_query_started_and_finished_its_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(query_rest.time, "sleep", lambda seconds: None)
    hold_file = str(tmp_path / "default" / "cf" / "hold")
    query = _Query(hold_file, [_status("Initializing sources"), _status("Processing new data", True),
                               _status("Waiting for data to arrive", True), _status("Waiting for data to arrive")])
    query_rest.bring_to_rest(query, hold_file)
    assert query.reads == 4


def test_stop_gives_up_waiting_after_its_timeout(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(query_rest.time, "sleep", lambda seconds: None)
    hold_file = str(tmp_path / "hold")
    query = _Query(hold_file, [_status("Processing new data", True)])
    query_rest.bring_to_rest(query, hold_file, timeout=0.05)
    assert query.reads > 1 and "did not come to rest" in caplog.text


def test_a_held_source_plans_no_batch(tmp_path):
    hold_file = tmp_path / "hold"
    hold_file.write_text("")
    reader = BinlogStreamReader(SourceOptions(index_path=str(tmp_path / "no-index"), upstream_uri="", start_ts=5,
                                              hold_file=str(hold_file)))
    assert reader.latestOffset(None) == reader.initialOffset()
    assert reader.latestOffset({"ts": 9, "piece": 2}) == {"ts": 9, "piece": 2}
    options = SourceOptions(index_path="i", upstream_uri="u", start_ts=1, hold_file=str(hold_file))
    assert SourceOptions.from_options(options.to_options()) == options


def test_waiting_for_a_start_ends_once_the_sources_are_initialized(tmp_path, monkeypatch):
    monkeypatch.setattr(query_rest.time, "sleep", lambda seconds: None)
    hold_file = tmp_path / "hold"
    hold_file.write_text("")  # only for _Query's check
    query = _Query(str(hold_file), [_status("Initializing StreamExecution"), _status("Initializing sources"),
                                    _status("Processing new data", True)])
    query_rest.wait_until_started(query)
    assert query.reads == 3
