"""StandaloneCluster.start (sparkcdc.testing.spark_cluster): a start that fails leaves no daemon
behind. The daemons here are stand-in processes (`sleep`), so only the helper's own bookkeeping is
under test; tests/e2e/test_spark_cluster.py starts the real master and worker."""

from __future__ import annotations

import subprocess

import pytest

from sparkcdc.testing import spark_cluster
from sparkcdc.testing.spark_cluster import StandaloneCluster


def stand_in_daemons(monkeypatch, argv_of) -> list[subprocess.Popen]:
    """Makes StandaloneCluster start `argv_of(name)` for its master and worker; the processes started."""
    started: list[subprocess.Popen] = []

    def start(work_dir, name, main_class, *args):
        process = spark_cluster.spawn_logged(work_dir, name, argv_of(name))
        started.append(process)
        return process

    monkeypatch.setattr(spark_cluster, "start_spark_jvm", start)
    return started


def test_a_start_that_times_out_stops_the_daemons_it_started(tmp_path, monkeypatch):
    started = stand_in_daemons(monkeypatch, lambda name: ["sleep", "300"])
    cluster = StandaloneCluster(str(tmp_path / "spark"))
    with pytest.raises(TimeoutError, match="no Spark worker registered"):
        cluster.start(timeout=0.5)
    assert len(started) == 2
    assert all(process.poll() is not None for process in started)


def test_a_daemon_that_exits_at_start_stops_the_other(tmp_path, monkeypatch):
    started = stand_in_daemons(monkeypatch,
                               lambda name: ["sleep", "300"] if name == "master" else ["sh", "-c", "exit 3"])
    with pytest.raises(RuntimeError, match="exited with 3"):
        StandaloneCluster(str(tmp_path / "spark")).start(timeout=30)
    assert all(process.poll() is not None for process in started)
