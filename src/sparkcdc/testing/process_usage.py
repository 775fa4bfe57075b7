"""CPU and memory of a process and all its descendants (server + Spark JVM + Python workers), read from
/proc, for tests and benchmarks that report what a run costs. Linux only."""

from __future__ import annotations

import os
import threading

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root_pid: int) -> list[int]:
    """`root_pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_usage(root_pid: int) -> tuple[float, int]:
    """(CPU seconds used so far, resident bytes now) of the process tree."""
    cpu, rss = 0.0, 0
    for pid in process_tree(root_pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            rss += int(fields[21]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
    return cpu, rss


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of the process tree now."""
    return tree_usage(root_pid)[1]


class PeakRSS(threading.Thread):
    """Samples a process tree's RSS every `interval` seconds until `stop()`; `peak` is the maximum."""

    def __init__(self, root_pid: int, interval: float = 0.25):
        super().__init__(name=f"peak-rss-{root_pid}", daemon=True)
        self.root_pid, self.interval, self.peak = root_pid, interval, 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.root_pid))
            self._done.wait(self.interval)

    def stop(self) -> int:
        self._done.set()
        self.join(5)
        return self.peak
