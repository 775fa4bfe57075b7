"""The process-tree accounting the benchmarks' memory figures come from (sparkcdc.testing.process_usage)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from sparkcdc.testing.process_usage import process_tree, spawning_copy, tree_breakdown, tree_pss_bytes, tree_rss_bytes

FORKS = """
import os, sys, time
if os.fork() == 0:          # a forked worker, as pyspark.daemon's: same executable, no exec
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""

# 64 MiB written before the fork: the worker shares those pages with its parent until it writes them.
FORKS_SHARING = """
import os, time
block = bytearray(os.urandom(1 << 20)) * 64
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""

SPAWNS = """
public class Spawns {
    public static void main(String[] args) throws Exception {
        new ProcessBuilder("sleep", "60").start();
        System.out.println("ready");
        Thread.sleep(60_000);
    }
}
"""


def _wait_for_children(proc: subprocess.Popen, count: int) -> list[int]:
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 10
    while len(tree := process_tree(proc.pid)) < count + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return tree


def test_a_forked_python_worker_is_counted():
    proc = subprocess.Popen([sys.executable, "-c", FORKS], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        tree = _wait_for_children(proc, 1)
        assert len(tree) == 2 and tree[0] == proc.pid
        assert not spawning_copy(tree[1], proc.pid)
        assert sum(count for count, _ in tree_breakdown(proc.pid).values()) == 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_pages_a_forked_worker_shares_count_once_in_pss():
    proc = subprocess.Popen([sys.executable, "-c", FORKS_SHARING], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert len(_wait_for_children(proc, 1)) == 2
        rss, pss = tree_rss_bytes(proc.pid), tree_pss_bytes(proc.pid)
        # RSS counts the 64 MiB in both processes, PSS once.
        assert rss >= 128 * 2**20
        assert 64 * 2**20 <= pss <= rss - 56 * 2**20
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (Spark's JVM)")
def test_a_program_a_jvm_started_is_counted(tmp_path):
    source = tmp_path / "Spawns.java"
    source.write_text(SPAWNS)
    proc = subprocess.Popen(["java", str(source)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        tree = _wait_for_children(proc, 1)
        labels = {os.path.basename(os.readlink(f"/proc/{pid}/exe")) for pid in tree}
        assert labels == {"java", "sleep"}
        assert not spawning_copy(tree[-1], proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
