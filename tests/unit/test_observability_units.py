"""Metrics, the status page's data and history, JSON logs and progress lines, without services."""

from __future__ import annotations

import io
import json
import logging
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcdc.api.server import serve
from sparkcdc.cli.logs import JsonFormatter
from sparkcdc.model import tso
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus as StoredStatus
from sparkcdc.observability.history import Sample, StatusHistory
from sparkcdc.observability.log_context import changefeed_context
from sparkcdc.observability.metrics import (
    BatchStats, CaptureStatus, ChangefeedStatus, Metrics, PullerStatus, SnapshotStatus, TriggerStatus,
)
from sparkcdc.observability.progress import Progress
from sparkcdc.server.metastore import MetaStore
from sparkcdc.server.observer import CaptureObserver, OwnershipClock
from sparkcdc.upstream.puller import PullerHealth

NOW = 1_700_000_100.0  # the tests' wall clock, seconds
ROOT = Path(__file__).parents[2]


def samples_of(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples, name, **labels):
    wanted = tuple(sorted(labels.items()))
    return samples.get((name, wanted))


def batch(rows: int, bytes_: int = 0, ddls: int = 0) -> BatchStats:
    return BatchStats(rows=rows, bytes=bytes_, ddls=ddls, plan_seconds=0.01, decode_seconds=0.2,
                      write_seconds=0.3, flush_seconds=0.05, ddl_seconds=0.4 if ddls else 0.0)


class FixedStatus:
    def __init__(self, status: CaptureStatus):
        self.status = status
        self.calls = 0

    def capture_status(self) -> CaptureStatus:
        self.calls += 1
        return self.status


def ts_at(seconds: float) -> int:
    return tso.compose(int(seconds * 1000))


def owner_status(**overrides) -> CaptureStatus:
    values = dict(is_owner=True, owner_seconds=42.0, captures=1, running=1,
                  changefeeds=(ChangefeedStatus("default", "cf", "normal", ts_at(NOW - 30), ts_at(NOW - 1),
                                                SnapshotStatus(1, 4, 3, 8, 30_000)),
                               ChangefeedStatus("ns2", "broken", "failed", ts_at(NOW - 900), ts_at(NOW - 900))),
                  puller=PullerStatus("running", 4096, 12, ts_at(NOW - 0.5)), index_bytes=8192,
                  triggers=(TriggerStatus("default", "cf", (("addBatch", 0.2), ("triggerExecution", 0.3))),))
    values.update(overrides)
    return CaptureStatus(**values)


def test_batch_metrics_count_rows_bytes_and_phases_per_changefeed():
    metrics = Metrics(clock=lambda: NOW, process_metrics=False)
    storage = metrics.changefeed("default", "cf", "storage")
    storage.record_batch(batch(100, 5000))
    storage.record_batch(batch(23, 700, ddls=1))
    metrics.changefeed("default", "other", "kafka").record_batch(batch(7, 70))
    assert metrics.changefeed("default", "cf", "storage") is storage  # a restart keeps counting
    storage.record_sink_error()
    storage.record_exit_with_error()
    found = samples_of(metrics)
    sink = {"namespace": "default", "changefeed": "cf", "type": "storage"}
    assert sample(found, "ticdc_sink_batch_row_count_sum", **sink) == 123
    assert sample(found, "ticdc_sink_batch_row_count_count", **sink) == 2
    assert sample(found, "ticdc_sink_write_bytes_total", **sink) == 5700
    assert sample(found, "ticdc_sink_ddl_exec_count", **sink) == 1
    assert sample(found, "ticdc_sink_ddl_exec_duration_count", **sink) == 1
    assert sample(found, "ticdc_sink_execution_error", **sink) == 1
    assert sample(found, "ticdc_processor_exit_with_error_count", namespace="default", changefeed="cf") == 1
    assert sample(found, "sparkcdc_batch_duration_seconds_sum", namespace="default", changefeed="cf",
                  phase="write") == pytest.approx(2 * 0.35 + 0.4)
    assert sample(found, "ticdc_sink_batch_row_count_sum", namespace="default", changefeed="other", type="kafka") == 7
    assert (storage.rows_written, storage.bytes_written) == (123, 5700)
    # A removed changefeed's series go; the other's stay.
    metrics.forget("default", "cf")
    found = samples_of(metrics)
    assert not [key for key in found if ("changefeed", "cf") in key[1]]
    assert sample(found, "ticdc_sink_batch_row_count_sum", namespace="default", changefeed="other", type="kafka") == 7


def test_a_new_sink_kind_starts_new_series():
    metrics = Metrics(process_metrics=False)
    metrics.changefeed("default", "cf", "storage").record_batch(batch(5))
    metrics.changefeed("default", "cf", "kafka").record_batch(batch(2))
    found = samples_of(metrics)
    assert sample(found, "ticdc_sink_batch_row_count_sum", namespace="default", changefeed="cf", type="storage") is None
    assert sample(found, "ticdc_sink_batch_row_count_sum", namespace="default", changefeed="cf", type="kafka") == 2


def test_owner_metrics_are_read_at_scrape_time_with_tidb_state_codes_and_lags_from_the_clock():
    metrics = Metrics(clock=lambda: NOW, process_metrics=False)
    source = FixedStatus(owner_status())
    metrics.watch(source)
    found = samples_of(metrics)
    cf = {"namespace": "default", "changefeed": "cf"}
    assert sample(found, "ticdc_owner_checkpoint_ts_lag", **cf) == pytest.approx(30, abs=0.01)
    assert sample(found, "ticdc_owner_resolved_ts_lag", **cf) == pytest.approx(1, abs=0.01)
    assert sample(found, "ticdc_owner_checkpoint_ts", **cf) == int((NOW - 30) * 1000)
    assert sample(found, "ticdc_owner_status", **cf) == 0
    broken = {"namespace": "ns2", "changefeed": "broken"}
    assert sample(found, "ticdc_owner_status", **broken) == 2
    assert sample(found, "ticdc_owner_checkpoint_ts_lag", **broken) is None  # TiCDC drops a stopped one's lags
    # The initial snapshot's progress, read from the store with the rest (only a changefeed with one).
    assert sample(found, "sparkcdc_snapshot_chunks", **cf, state="done") == 3
    assert sample(found, "sparkcdc_snapshot_chunks", **cf, state="total") == 8
    assert sample(found, "sparkcdc_snapshot_tables", **cf, state="total") == 4
    assert sample(found, "sparkcdc_snapshot_rows", **cf) == 30_000
    assert sample(found, "sparkcdc_snapshot_rows", **broken) is None
    assert found[("ticdc_owner_ownership_counter", ())] == 42
    assert found[("sparkcdc_capture_is_owner", ())] == 1
    assert found[("sparkcdc_puller_binlog_bytes_total", ())] == 4096
    assert found[("sparkcdc_puller_transactions_total", ())] == 12
    assert found[("sparkcdc_puller_state", (("state", "running"),))] == 1
    assert found[("sparkcdc_puller_resolved_ts_lag", ())] == pytest.approx(0.5, abs=0.01)
    assert found[("sparkcdc_txn_index_size_bytes", ())] == 8192
    assert source.calls == 1  # read once per scrape
    # A capture that is not the owner reports no changefeed (sums over captures count each once).
    source.status = owner_status(is_owner=False)
    found = samples_of(metrics)
    assert not [key for key in found if key[0].startswith("ticdc_owner_") and key[0] != "ticdc_owner_ownership_counter"]
    assert found[("sparkcdc_capture_is_owner", ())] == 0


def test_a_failing_status_source_leaves_the_rest_of_the_scrape():
    class Broken:
        def capture_status(self):
            raise ConnectionError("etcd is down")

    metrics = Metrics(process_metrics=False)
    metrics.watch(Broken())
    metrics.changefeed("default", "cf", "mysql").record_batch(batch(3))
    found = samples_of(metrics)
    assert sample(found, "ticdc_sink_batch_row_count_sum", namespace="default", changefeed="cf", type="mysql") == 3
    assert not [key for key in found if key[0].startswith("ticdc_owner_")]


def test_redo_metrics():
    metrics = Metrics(process_metrics=False)
    changefeed = metrics.changefeed("default", "cf", "mysql")
    redo = changefeed.redo("row")
    redo.record_write(1000, 10, 0.002)
    redo.record_write(500, 5, 0.001)
    redo.record_flush(0.01)
    found = samples_of(metrics)
    row = {"namespace": "default", "changefeed": "cf", "type": "row"}
    assert sample(found, "ticdc_redo_write_bytes_total", **row) == 1500
    assert sample(found, "ticdc_redo_total_rows_count", **row) == 15
    assert sample(found, "ticdc_redo_write_log_duration_seconds_count", **row) == 2
    assert sample(found, "ticdc_redo_flush_all_duration_seconds_count", **row) == 1


def exported_sample_names() -> set[str]:
    """Every sample name a capture exports once each kind of number has been recorded."""
    metrics = Metrics(clock=lambda: NOW)
    metrics.watch(FixedStatus(owner_status()))
    changefeed = metrics.changefeed("default", "cf", "storage")
    changefeed.record_batch(batch(10, 100, ddls=1))
    changefeed.record_sink_error()
    changefeed.record_exit_with_error()
    changefeed.redo("row").record_write(10, 1, 0.001)
    changefeed.redo("row").record_flush(0.001)
    return {name for name, _ in samples_of(metrics)}


def referenced_metrics(expression: str) -> set[str]:
    """Metric names in a PromQL expression (identifiers of our and the process's families)."""
    return set(re.findall(r"\b((?:ticdc|sparkcdc|process|python)_[a-zA-Z0-9_]+)", expression))


def dashboard_expressions() -> list[str]:
    document = json.loads((ROOT / "docs" / "grafana" / "sparkcdc.json").read_text())
    expressions = []
    pending = list(document["panels"])
    while pending:
        panel = pending.pop()
        pending.extend(panel.get("panels", []))
        expressions.extend(target["expr"] for target in panel.get("targets", []))
    expressions.extend(variable["query"] for variable in document["templating"]["list"])
    return expressions


def test_the_grafana_dashboard_references_only_exported_metrics():
    exported = exported_sample_names()
    expressions = dashboard_expressions()
    assert len(expressions) >= 25
    referenced = set().union(*map(referenced_metrics, expressions))
    assert referenced and not referenced - exported, sorted(referenced - exported)
    # ... and shows what operators of TiCDC look at first.
    for name in ("ticdc_owner_checkpoint_ts_lag", "ticdc_owner_resolved_ts_lag", "ticdc_owner_status",
                 "ticdc_sink_batch_row_count_sum", "ticdc_sink_write_bytes_total"):
        assert name in referenced


def test_the_example_alert_rules_reference_only_exported_metrics():
    rules = (ROOT / "docs" / "prometheus-rules.yml").read_text()
    expressions = re.findall(r"^\s*expr:\s*(.+)$", rules, re.MULTILINE)
    assert len(expressions) >= 5
    referenced = set().union(*map(referenced_metrics, expressions))
    assert not referenced - exported_sample_names(), sorted(referenced - exported_sample_names())
    # docs/operations.md shows the same file.
    assert rules.strip() in (ROOT / "docs" / "operations.md").read_text()


def test_history_gives_rates_between_samples_and_forgets_old_changefeeds():
    history = StatusHistory(window=60, interval=2)
    key = ("default", "cf")
    history.record(100, {key: Sample(100, 5.0, 0)})
    history.record(102, {key: Sample(102, 4.0, 1000)})
    history.record(104, {key: Sample(104, 1.0, 1600)})
    history.record(106, {key: Sample(106, None, 10)})  # a restarted server's counter: no rate
    points = history.series(key, now=106)
    assert [(p.lag, p.rows_per_second) for p in points] == [(5.0, None), (4.0, 500.0), (1.0, 300.0), (None, None)]
    assert [p.time for p in history.series(key, now=163)] == [104, 106]  # the window
    history.record(300, {("default", "other"): Sample(300, 1.0, 0)})
    assert history.series(key, now=300) == []


def test_ownership_clock_counts_only_time_as_owner():
    now = [0.0]
    clock = OwnershipClock(clock=lambda: now[0])
    assert clock.observe(True) == 0
    now[0] = 5
    assert clock.observe(True) == 5
    now[0] = 7
    assert clock.observe(False) == 5  # when between 5 and 7 it lost ownership is unknown: not counted
    now[0] = 20
    assert clock.observe(True) == 5
    now[0] = 21
    assert clock.observe(True) == 6


def test_json_log_lines_carry_the_changefeed_fields_and_no_secrets():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("sparkcdc.test.jsonlog")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        with changefeed_context("default", "cf-1"):
            logger.warning("sink mysql://cdc:hunter2@db:3306/ is slow",
                           extra={"rows": 12, "uri": "s3://b/p?secret-access-key=abc"})
        logger.info("plain", extra={"changefeed": "ns/explicit"})
        try:
            raise ValueError("password=topsecret")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 3
    first, second, third = lines
    assert first["level"] == "WARN" and first["logger"] == "sparkcdc.test.jsonlog"
    assert first["changefeed"] == "default/cf-1"
    assert first["fields"]["rows"] == 12
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$", first["time"])
    assert second["changefeed"] == "ns/explicit" and "fields" not in second
    assert third["level"] == "ERROR" and "ValueError" in third["message"]
    text = stream.getvalue()
    assert "hunter2" not in text and "topsecret" not in text and "abc" not in text


def test_progress_draws_on_a_terminal_logs_periodically_and_gives_an_eta(caplog):
    now = [0.0]
    stream = io.StringIO()
    progress = Progress("diff", unit="rows", total=1000, stream=stream, clock=lambda: now[0], log_every=10,
                        refresh_every=0.5, terminal=True, logger=logging.getLogger("sparkcdc.test.progress"))
    with caplog.at_level(logging.INFO, logger="sparkcdc.test.progress"):
        now[0] = 1.0
        progress.advance(100)
        assert stream.getvalue().endswith("diff: 100 / 1,000 rows (10.0%), 100 rows/s, ETA 0:00:09")
        now[0] = 1.1
        progress.advance(10)  # too soon to redraw
        assert "110 /" not in stream.getvalue()
        now[0] = 10.0
        progress.advance(390)
        assert progress.text() == "500 / 1,000 rows (50.0%), 50 rows/s, ETA 0:00:10"
        now[0] = 20.0
        progress.advance(500)
        progress.finish()
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["diff: 500 / 1,000 rows (50.0%), 50 rows/s, ETA 0:00:10",
                        "diff: 1,000 / 1,000 rows (100.0%), 50 rows/s",
                        "diff: done, 1,000 rows in 0:00:20 (50 rows/s)"]
    assert stream.getvalue().endswith("\n")


def test_progress_without_a_terminal_only_logs(caplog):
    stream = io.StringIO()
    now = [0.0]
    progress = Progress("redo apply", unit="rows", stream=stream, clock=lambda: now[0], log_every=5,
                        logger=logging.getLogger("sparkcdc.test.progress"))
    with caplog.at_level(logging.INFO, logger="sparkcdc.test.progress"):
        now[0] = 6
        progress.advance(60)
    assert stream.getvalue() == ""
    assert [r.getMessage() for r in caplog.records] == ["redo apply: 60 rows, 10 rows/s"]


class FakeCapture:
    """What the observer reads of a capture: a real SQLite store, the rest fixed."""

    def __init__(self, store: MetaStore, index_path: str, owner: bool = True):
        self.store, self.index_path, self.owner = store, index_path, owner

    def capture_info(self):
        return {"id": "cap-1", "address": "127.0.0.1:8300", "cluster_id": "default", "is_owner": self.owner}

    def list_captures(self):
        return [{"id": "cap-1", "address": "127.0.0.1:8300", "is_owner": self.owner}]

    def running_changefeeds(self):
        return [("default", "cf")]

    def puller_totals(self):
        return 3, 300

    def last_triggers(self):
        return {("default", "cf"): {"addBatch": 0.25, "latestOffset": 0.01, "triggerExecution": 0.3}}

    def puller_health(self):
        return PullerHealth("running", "mysql://root@127.0.0.1/", NOW)

    def puller_resolved_ts(self):
        return ts_at(NOW - 0.25)

    def puller_state(self):
        return {"state": "running", "error": None}


def add_changefeed(store: MetaStore, changefeed_id: str, state: str, checkpoint_ts: int, error=None) -> None:
    store.create_changefeed(
        ChangefeedInfo("default", changefeed_id, 0, "mysql://cdc:pw@db:3306/", "", checkpoint_ts, 0, state, error, {},
                       "0.1.0"), StoredStatus(checkpoint_ts, checkpoint_ts))


def test_observer_reads_the_store_and_serves_the_status_page_data(tmp_path):
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    add_changefeed(store, "cf", "normal", ts_at(NOW - 12))
    add_changefeed(store, "bad", "failed", ts_at(NOW - 600),
                   {"code": "SPARKCDC:ErrStorageIO", "message": "cannot write", "time": "t"})
    (tmp_path / "txn-index.sqlite").write_bytes(b"x" * 1000)
    now = [NOW]
    metrics = Metrics(clock=lambda: now[0], process_metrics=False)
    observer = CaptureObserver(FakeCapture(store, str(tmp_path / "txn-index.sqlite")), metrics, clock=lambda: now[0],
                               history=StatusHistory(window=60, interval=2))
    status = observer.capture_status()
    assert status.index_bytes == 1000 and status.running == 1 and status.captures == 1
    assert status.puller == PullerStatus("running", 300, 3, ts_at(NOW - 0.25))
    running = next(c for c in status.changefeeds if c.id == "cf")
    assert running.resolved_ts == ts_at(NOW - 0.25)  # a running changefeed can reach the puller's resolved ts
    changefeed = metrics.changefeed("default", "cf", "mysql")
    observer.sample()
    changefeed.record_batch(batch(400))
    now[0] += 2
    observer.sample()
    overview = observer.overview()
    assert [c["id"] for c in overview["changefeeds"]] == ["bad", "cf"]
    bad, cf = overview["changefeeds"]
    assert cf["state"] == "normal" and cf["checkpoint_lag"] == pytest.approx(14, abs=0.01)
    assert cf["rows_written"] == 400 and cf["rows_per_second"] == 200 and cf["on_this_capture"]
    assert len(cf["history"]) == 2 and cf["history"][1][2] == 200
    assert cf["sink_uri"] == "mysql://cdc:xxxxx@db:3306/"  # never a password
    assert bad["state"] == "failed" and bad["checkpoint_lag"] is None
    assert bad["error"]["code"] == "SPARKCDC:ErrStorageIO"
    assert overview["captures"] == [{"id": "cap-1", "address": "127.0.0.1:8300", "is_owner": True}]
    found = samples_of(metrics)
    assert sample(found, "ticdc_owner_status", namespace="default", changefeed="bad") == 2
    assert sample(found, "sparkcdc_spark_trigger_seconds", namespace="default", changefeed="cf",
                  phase="addBatch") == 0.25
    # A removed changefeed's series go at the next sample.
    metrics.changefeed("default", "gone", "kafka").record_batch(batch(1))
    observer.sample()
    assert metrics.changefeeds() == [("default", "cf")]
    assert not [key for key in samples_of(metrics) if ("changefeed", "gone") in key[1]]


class FakeObservability:
    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def metrics_exposition(self) -> bytes:
        return b"# HELP x y\n"

    def overview(self) -> dict:
        return {"changefeeds": []}


def fetch(url: str):
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.parametrize("enabled", [True, False])
def test_api_serves_metrics_and_the_status_page_only_when_on(tmp_path, enabled):
    from test_api_server import FakeController

    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), FakeController(),
                observability=FakeObservability() if enabled else None)
    api.start()
    try:
        status, headers, body = fetch(api.url + "/metrics")
        if not enabled:
            assert status == 404 and json.loads(body)["error_code"] == "SPARKCDC:ErrAPINotFound"
            assert b"--metrics on" in body
            return
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4") and body.startswith(b"# HELP")
        status, headers, _ = fetch(api.url + "/")
        assert status == 302 and headers["Location"] == "/dashboard"
        status, headers, body = fetch(api.url + "/dashboard")
        assert status == 200 and headers["Content-Type"].startswith("text/html") and b"/dashboard/data" in body
        status, _, body = fetch(api.url + "/dashboard/data")
        assert status == 200 and json.loads(body) == {"changefeeds": []}
        assert fetch(api.url + "/metrics?x=1")[0] == 200
        assert fetch(api.url + "/metricsx")[0] == 404
    finally:
        api.shutdown()


def test_the_redo_writer_records_its_frames_bytes_rows_and_syncs(tmp_path):
    from sparkcdc.config.replica import ConsistentConfig
    from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
    from sparkcdc.redo.storage import RedoStorage
    from sparkcdc.redo.writer import RedoWriter

    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),), 1, ("id",))
    metrics = Metrics(process_metrics=False)
    writer = RedoWriter(RedoStorage.from_uri(f"file://{tmp_path}/redo"),
                        ConsistentConfig(level="eventual", storage="file:///unused"), "default/cf",
                        metrics=metrics.changefeed("default", "cf", "mysql"))
    batch = writer.batch(100, 200)
    batch.add_rows(info, [RowChange(150 + i, "db", "t", "insert", None, (str(i),), 0) for i in range(7)])
    batch.add_ddls([DDLEvent(200, "db", "t", "ALTER TABLE t ADD c INT", "add column")])
    batch.commit()
    writer.close()
    found = samples_of(metrics)
    row = {"namespace": "default", "changefeed": "cf", "type": "row"}
    ddl = {**row, "type": "ddl"}
    assert sample(found, "ticdc_redo_total_rows_count", **row) == 7
    assert sample(found, "ticdc_redo_total_rows_count", **ddl) == 0  # a DDL frame has no rows
    assert sample(found, "ticdc_redo_write_log_duration_seconds_count", **ddl) == 1
    assert sample(found, "ticdc_redo_flush_all_duration_seconds_count", **row) == 1
    # Every byte of the log files (the rows, the DDL and the COMMIT frame) is counted once.
    on_disk = sum(path.stat().st_size for path in (tmp_path / "redo").iterdir() if path.name.endswith(".log"))
    commit_frames = on_disk - sample(found, "ticdc_redo_write_bytes_total", **row) \
        - sample(found, "ticdc_redo_write_bytes_total", **ddl)
    assert 0 < commit_frames < 100


def test_a_batch_reports_the_bytes_its_sink_wrote_and_where_the_time_went(tmp_path):
    from sparkcdc.config.replica import SinkConfig
    from sparkcdc.filter.table_filter import TableFilter
    from sparkcdc.model.change_batch import RANGE_MARKER
    from sparkcdc.model.events import ColumnInfo, TableInfo
    from sparkcdc.pipeline.batch_sink import write_batch
    from sparkcdc.sink.storage.writer import StorageSink
    from test_pipeline_planning import FakeIndex, batch_table

    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")), 1,
                     ("id",))
    sink = StorageSink(f"file://{tmp_path}/out?protocol=canal-json", SinkConfig(protocol="canal-json"))
    table = batch_table([(20 + i, 0, "db", "t", "insert", None, [str(i), str(i)]) for i in range(50)]
                        + [(100, 0, "", "", RANGE_MARKER, None, None)])
    result = write_batch(table, FakeIndex([], 100, tables=[info]), sink, TableFilter(["*.*"]).match_event,
                         lambda ts: None)
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert result.rows == 50
    assert result.bytes_written == sink.bytes_written == sum(p.stat().st_size for p in files) > 0
    assert result.write_seconds >= 0 and result.flush_seconds > 0 and result.ddl_seconds >= 0


def test_redo_apply_advances_its_progress_per_step():
    from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
    from sparkcdc.redo.applier import apply_steps
    from sparkcdc.redo.format import RedoMeta
    from sparkcdc.redo.reader import RowStep
    from test_pipeline_planning import RecordingSink

    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),), 1, ("id",))
    steps = [RowStep(info, [RowChange(ts, "db", "t", "insert", None, (str(ts),), 0) for ts in range(lo, lo + 3)])
             for lo in (10, 20)]
    progress = Progress("redo apply", stream=io.StringIO(), terminal=False)
    result = apply_steps(steps, RecordingSink(), RedoMeta(5, 30, "default/cf"), progress)
    assert result.rows == progress.done == 6


def test_the_storage_consumer_advances_its_progress_by_the_rows_it_applies(tmp_path):
    from sparkcdc.config.replica import SinkConfig
    from sparkcdc.consumer.storage_consumer import StorageConsumer, run_consumer
    from sparkcdc.filter.table_filter import TableFilter
    from sparkcdc.model.change_batch import RANGE_MARKER
    from sparkcdc.model.events import ColumnInfo, TableInfo
    from sparkcdc.pipeline.batch_sink import write_batch
    from sparkcdc.sink.storage.writer import StorageSink
    from test_pipeline_planning import FakeIndex, RecordingSink, batch_table

    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")), 1,
                     ("id",))
    uri = f"file://{tmp_path}/out?protocol=canal-json&enable-tidb-extension=true"
    sink = StorageSink(uri, SinkConfig(protocol="canal-json", enable_tidb_extension=True))
    write_batch(batch_table([(20 + i, 0, "db", "t", "insert", None, [str(i), str(i)]) for i in range(30)]
                            + [(100, 0, "", "", RANGE_MARKER, None, None)]),
                FakeIndex([], 100, tables=[info]), sink, TableFilter(["*.*"]).match_event, lambda ts: None)
    downstream = RecordingSink()
    progress = Progress("storage consumer", stream=io.StringIO(), terminal=False)
    assert run_consumer(StorageConsumer(uri, downstream, "canal-json"), 1.0, once=True, progress=progress) == 100
    applied = sum(len(call[2]) for call in downstream.calls if call[0] == "rows")
    assert progress.done == applied == 30


def test_index_size_counts_the_files_there_and_a_vanished_wal_as_nothing(tmp_path):
    """SQLite removes the index's WAL when its last connection closes, between any two calls:
    the size is the files there are (a scrape used to lose the whole capture's status)."""
    from sparkcdc.server.observer import index_size_bytes

    index = tmp_path / "txn-index.sqlite"
    index.write_bytes(b"x" * 10)
    (tmp_path / "txn-index.sqlite-shm").write_bytes(b"y" * 3)
    assert index_size_bytes(str(index)) == 13
    (tmp_path / "txn-index.sqlite-wal").write_bytes(b"z" * 5)
    assert index_size_bytes(str(index)) == 18
    assert index_size_bytes(str(tmp_path / "absent.sqlite")) == 0
