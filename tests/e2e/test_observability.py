"""Observability of a running server, on one server and its changefeeds: /metrics scraped while a
changefeed catches up and runs (the rows counter moves by exactly the rows the sink wrote, the
checkpoint lag falls after the catch-up, a failed changefeed shows), `cli changefeed statistics`,
the JSON log format, and the status page in a real headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcdc.model import tso
from sparkcdc.testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

DATABASE = "obs_e2e"
BACKLOG_ROWS = 3000  # written before the changefeed exists: its catch-up
LIVE_ROWS = 500  # written while it runs
BACKLOG_AGE = 8.0  # seconds between the backlog's start position and the changefeed's create
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def scrape(server: ServerProcess) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus-client's own parser: (name, labels) -> value."""
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, changefeed: str, **labels) -> float | None:
    wanted = {"namespace": "default", "changefeed": changefeed, **labels}
    for (sample_name, sample_labels), sample_value in samples.items():
        if sample_name == name and all(dict(sample_labels).get(k) == v for k, v in wanted.items()):
            return sample_value
    return None


def wait_for(condition, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def insert_rows(conn, first: int, count: int, per_transaction: int = 100) -> None:
    with conn.cursor() as cur:
        for start in range(first, first + count, per_transaction):
            ids = range(start, min(start + per_transaction, first + count))
            cur.execute(f"INSERT INTO `{DATABASE}`.items (id, name) VALUES "
                        + ",".join(f"({i}, 'item-{i}')" for i in ids))
            conn.commit()


def rows_in_files(root: str) -> int:
    """Row changes in the storage sink's canal-json files: an independent count of what it wrote."""
    rows = 0
    for path in glob.glob(os.path.join(root, DATABASE, "items", "**", "CDC*.json"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                message = json.loads(line)
                if message.get("type") in ("INSERT", "UPDATE", "DELETE"):
                    rows += len(message["data"])
    return rows


@pytest.fixture(scope="module")
def observed(mariadb, tmp_path_factory):
    """One server (JSON logs) with a changefeed that caught up on a backlog and one that failed."""
    base = tmp_path_factory.mktemp("observability")
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        cur.execute(f"CREATE DATABASE `{DATABASE}`")
        cur.execute(f"CREATE TABLE `{DATABASE}`.items (id INT PRIMARY KEY, name VARCHAR(32))")
    up.commit()
    server = ServerProcess(str(base / "cdc"), mariadb.uri, extra_args=("--log-format", "json")).start()
    config = base / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{DATABASE}.*"]\n')
    state = {"server": server, "up": up, "output": str(base / "out"), "scrapes": []}
    try:
        start_ts = tso.compose(server.api("POST", "/api/v2/tso")["timestamp"])
        # A commit-ts is above the puller's resolved-ts when the transaction is read, and that moves
        # with the clock four times a second: after a second every new transaction is above start_ts.
        time.sleep(1.5)
        insert_rows(up, 0, BACKLOG_ROWS)
        time.sleep(BACKLOG_AGE)
        server.cli("changefeed", "create", "-c", "obs-files", "--config", str(config), "--start-ts", str(start_ts),
                   "--sink-uri", f"file://{state['output']}?protocol=canal-json")
        # Scraped from the create on, once a second, until the backlog is written and the lag is low.
        def caught_up():
            samples = scrape(server)
            state["scrapes"].append((time.monotonic(), samples))
            rows = value(samples, "ticdc_sink_batch_row_count_sum", "obs-files")
            lag = value(samples, "ticdc_owner_checkpoint_ts_lag", "obs-files")
            return rows == BACKLOG_ROWS and lag is not None and lag < 5
        state["caught_up_in"] = time.monotonic()
        wait_for(caught_up, 300, "the backlog written and the checkpoint lag under 5 s")
        state["caught_up_in"] = time.monotonic() - state["caught_up_in"]
        # The sink's directory for the database is a file: its first write fails for good.
        broken = base / "broken"
        broken.mkdir()
        (broken / DATABASE).write_text("not a directory")
        server.cli("changefeed", "create", "-c", "obs-broken", "--config", str(config),
                   "--sink-uri", f"file://{broken}?protocol=canal-json")
        # An initial-only snapshot of the backlog (3 chunks), finished before the tests write more.
        snapshot_config = base / "snapshot.toml"
        snapshot_config.write_text(f'[filter]\nrules = ["{DATABASE}.*"]\n\n[snapshot]\nmode = "initial-only"\n'
                                   'chunk-size = 1000\n')
        server.cli("changefeed", "create", "-c", "obs-snapshot", "--config", str(snapshot_config),
                   "--sink-uri", f"file://{base / 'snapshot-out'}?protocol=canal-json")
        wait_for(lambda: server.api("GET", "/api/v2/changefeeds/obs-snapshot")["state"] == "finished", 300,
                 "the snapshot changefeed to finish")
        yield state
    finally:
        server.stop()


def test_metrics_follow_a_changefeed(observed):
    server, up = observed["server"], observed["up"]
    scrapes = observed["scrapes"]
    # Right after the create the checkpoint is the backlog's start: the lag is at least its age;
    # after the catch-up it fell below 5 s.
    first_lag = next(value(s, "ticdc_owner_checkpoint_ts_lag", "obs-files") for _, s in scrapes
                     if value(s, "ticdc_owner_checkpoint_ts_lag", "obs-files") is not None)
    assert first_lag >= BACKLOG_AGE
    assert value(scrapes[-1][1], "ticdc_owner_checkpoint_ts_lag", "obs-files") < 5
    assert value(scrapes[0][1], "ticdc_owner_status", "obs-files") == 0  # normal
    # The counter only grows, and ends at exactly the backlog (not at 0 and never above).
    counts = [value(s, "ticdc_sink_batch_row_count_sum", "obs-files") or 0 for _, s in scrapes]
    assert counts == sorted(counts) and counts[-1] == BACKLOG_ROWS

    before = scrape(server)
    insert_rows(up, BACKLOG_ROWS, LIVE_ROWS, per_transaction=50)
    expected = BACKLOG_ROWS + LIVE_ROWS
    after = wait_for(lambda: (s := scrape(server)) and
                     value(s, "ticdc_sink_batch_row_count_sum", "obs-files") == expected and s, 180,
                     f"{expected} rows counted")
    assert rows_in_files(observed["output"]) == expected  # what the sink wrote, read back from its files
    bytes_written = value(after, "ticdc_sink_write_bytes_total", "obs-files", type="storage")
    assert bytes_written > value(before, "ticdc_sink_write_bytes_total", "obs-files", type="storage") > 0
    assert value(after, "ticdc_sink_batch_row_count_count", "obs-files") > \
        value(before, "ticdc_sink_batch_row_count_count", "obs-files")  # batches
    for phase in ("plan", "decode", "write"):
        assert value(after, "sparkcdc_batch_duration_seconds_count", "obs-files", phase=phase) >= 1
    # Spark's own phases of the query's last trigger.
    assert value(after, "sparkcdc_spark_trigger_seconds", "obs-files", phase="triggerExecution") > 0
    assert value(after, "sparkcdc_spark_trigger_seconds", "obs-files", phase="latestOffset") is not None
    assert value(after, "sparkcdc_sink_flush_duration_seconds_count", "obs-files", type="storage") >= 1
    # The capture: owner, the puller read the binlog, its index has a size, the process its memory.
    assert after[("sparkcdc_capture_is_owner", ())] == 1
    assert after[("sparkcdc_puller_binlog_bytes_total", ())] > before[("sparkcdc_puller_binlog_bytes_total", ())]
    assert after[("sparkcdc_puller_state", (("state", "running"),))] == 1
    assert after[("sparkcdc_txn_index_size_bytes", ())] > 0
    assert after[("process_resident_memory_bytes", ())] > 0
    assert after[("ticdc_owner_ownership_counter", ())] > 0
    # No URI, password or other label than the changefeed's name and namespace.
    for name, labels in after:
        assert set(dict(labels)) <= {"namespace", "changefeed", "type", "phase", "state", "le", "quantile",
                                     "generation", "implementation", "major", "minor", "patchlevel", "version"}, name


def test_a_failed_changefeed_shows_in_the_metrics(observed):
    server, up = observed["server"], observed["up"]
    insert_rows(up, 10_000, 1)
    failed = wait_for(lambda: (s := scrape(server)) and value(s, "ticdc_owner_status", "obs-broken") == 2 and s,
                      180, "obs-broken failed in ticdc_owner_status")
    assert value(failed, "ticdc_processor_exit_with_error_count", "obs-broken") >= 1
    assert value(failed, "ticdc_sink_execution_error", "obs-broken", type="storage") >= 1
    # A failed changefeed has no lag to report (as TiCDC's owner); the other one still does.
    assert value(failed, "ticdc_owner_checkpoint_ts_lag", "obs-broken") is None
    assert value(failed, "ticdc_owner_checkpoint_ts_lag", "obs-files") is not None
    assert server.api("GET", "/api/v2/changefeeds/obs-broken")["error"]["code"] == "SPARKCDC:ErrStorageIO"


def test_snapshot_progress_in_the_metrics(observed):
    samples = scrape(observed["server"])
    assert value(samples, "ticdc_owner_status", "obs-snapshot") == 4  # finished (initial-only)
    done = value(samples, "sparkcdc_snapshot_chunks", "obs-snapshot", state="done")
    assert done == value(samples, "sparkcdc_snapshot_chunks", "obs-snapshot", state="total") >= 3
    assert value(samples, "sparkcdc_snapshot_tables", "obs-snapshot", state="done") == 1
    assert value(samples, "sparkcdc_snapshot_rows", "obs-snapshot") == BACKLOG_ROWS
    assert value(samples, "sparkcdc_snapshot_rows", "obs-files") is None  # no [snapshot]
    overview = observed["server"].api("GET", "/dashboard/data")
    snapshot = next(c for c in overview["changefeeds"] if c["id"] == "obs-snapshot")["snapshot"]
    assert snapshot["state"] == "done" and snapshot["rows"] == BACKLOG_ROWS


def test_cli_statistics_and_json_logs(observed):
    server, up = observed["server"], observed["up"]
    with up.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{DATABASE}`.items")
        written = cur.fetchone()[0]  # every row was an insert
    up.commit()
    wait_for(lambda: value(scrape(server), "ticdc_sink_batch_row_count_sum", "obs-files") == written
             == rows_in_files(observed["output"]), 120, f"{written} rows counted and in the files")
    result = server.cli("changefeed", "statistics", "-c", "obs-files", "-I", "1", "--iterations", "2")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines[0]["count"] == lines[1]["count"] == written
    assert lines[0]["ops"] is None and lines[1]["ops"] == 0  # nothing written between the two
    assert lines[1]["replication_gap"].endswith("ms") and lines[1]["checkpoint"]
    # --log-format json: every line the server itself logged is one JSON object, and a batch's
    # line names its changefeed.
    with open(os.path.join(server.data_dir, "server.log"), encoding="utf-8") as log:
        records = [json.loads(line) for line in log if line.startswith('{"time"')]
    assert records and all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    batches = [r for r in records if r["logger"] == "sparkcdc.pipeline.runner" and " batch " in r["message"]
               and r.get("changefeed") == "default/obs-files"]
    # Each batch's line carries its numbers as fields: their rows add up to what the sink wrote.
    assert batches and sum(r["fields"]["rows"] for r in batches) == written
    assert all(r["fields"]["end_ts"] > r["fields"]["start_ts"] for r in batches)
    assert any(r["level"] == "ERROR" and r.get("changefeed") == "default/obs-broken" for r in records)


@pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                    reason="needs Debian's chromium and chromium-driver (scripts/setup.sh installs them)")
def test_status_page_in_a_browser(observed, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.common.by import By

    server = observed["server"]
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        driver.set_page_load_timeout(60)
        driver.get(server.url + "/")  # redirects to /dashboard
        assert driver.current_url.endswith("/dashboard")

        def row(changefeed: str):
            found = driver.find_elements(By.CSS_SELECTOR, f'tr[data-changefeed="default/{changefeed}"]')
            return found[0] if found else None

        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "body[data-loaded=true]"), 60, "the page's first data")
        files = wait_for(lambda: row("obs-files"), 30, "the obs-files row")
        assert files.find_element(By.CSS_SELECTOR, ".state").text == "normal"
        assert float(files.find_element(By.CSS_SELECTOR, ".lag").get_attribute("data-value")) < 10
        written = rows_in_files(observed["output"])
        wait_for(lambda: row("obs-files").find_element(By.CSS_SELECTOR, ".rows-written").get_attribute("data-value")
                 == str(written), 30, f"{written} rows written shown")
        broken = wait_for(lambda: row("obs-broken"), 30, "the obs-broken row")
        assert broken.find_element(By.CSS_SELECTOR, ".state").text == "failed"
        assert "ErrStorageIO" in broken.find_element(By.CSS_SELECTOR, ".error").text
        captures = driver.find_elements(By.CSS_SELECTOR, "tr.capture")
        assert len(captures) == 1 and "owner" in captures[0].text
        assert driver.find_element(By.ID, "puller-state").text == "running"
        # The chart has the lag of the last minutes (the history is sampled every 2 s).
        wait_for(lambda: int(driver.find_element(
            By.CSS_SELECTOR, '.card[data-changefeed="default/obs-files"] polyline.lag').get_attribute("data-points"))
            >= 3, 30, "three points of lag in the chart")
        assert not driver.find_element(By.ID, "problem").text
        shot = tmp_path / "status-page.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("SPARKCDC_SCREENSHOT_DIR"):  # docs/images is refreshed this way
            shutil.copy(shot, os.path.join(os.environ["SPARKCDC_SCREENSHOT_DIR"], "status-page.png"))
    finally:
        driver.quit()
