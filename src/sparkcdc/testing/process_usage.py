"""CPU and memory of a process and all its descendants (server + Spark JVM + Python workers), read from
/proc, for tests and benchmarks that report what a run costs. Linux only."""

from __future__ import annotations

import os
import threading
from typing import Optional

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root_pid: int) -> list[int]:
    """`root_pid` and every process below it, without a JVM's copies of itself that are starting
    another program (spawning_copy)."""
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
    tree, todo = [], [(root_pid, 0)]
    while todo:
        pid, parent = todo.pop()
        if parent and spawning_copy(pid, parent):
            continue
        tree.append(pid)
        todo.extend((child, pid) for child in children.get(pid, []))
    return tree


def spawning_copy(pid: int, parent: int) -> bool:
    """Whether `pid` is the JVM `parent` starting a program (ProcessBuilder: between the fork or
    vfork and the exec): a child still running java. It has no memory of its own, but its RSS
    is the whole JVM's, so a sample that fell in that moment counted the JVM twice (a benchmark's
    peak once showed `java x2`, ~350 MiB too much). Spark's JVM never runs java children."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        return os.path.basename(exe) == "java" and os.readlink(f"/proc/{parent}/exe") == exe
    except OSError:
        return False


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


def process_pss_bytes(pid: int) -> int:
    """Proportional set size of a process: its resident pages, each shared page divided among the
    processes mapping it (a forked Python worker and its daemon, the shared libraries every Python
    process maps). Summed over a tree, every page it holds counts once; RSS counts a shared page in
    every process. 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def tree_pss_bytes(root_pid: int, pids: Optional[list[int]] = None) -> int:
    """Proportional set size of the process tree now (of `pids`, its process_tree, when the caller
    has it): the memory it holds, each page once."""
    return sum(process_pss_bytes(pid) for pid in (process_tree(root_pid) if pids is None else pids))


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of the process tree now."""
    return tree_usage(root_pid)[1]


def process_label(pid: int) -> str:
    """What a process of a server's tree is, for memory reports: `java` (Spark's JVM), `python
    pyspark.daemon` (a Python worker or the daemon forking them), `python sparkcdc server` ..."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [arg.decode(errors="replace") for arg in f.read().split(b"\0") if arg]
    except OSError:
        return "gone"
    if not argv:
        return "?"
    program = os.path.basename(argv[0])
    if program == "java":
        return "java"
    if program.startswith("python"):
        rest = argv[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"python {rest[1]}"
        if rest[:1] == ["-c"]:
            return "python -c"
        words = [os.path.basename(arg) for arg in rest if not arg.startswith("-")][:2]
        return " ".join(["python", *words])
    return program


def tree_breakdown(root_pid: int, pids: Optional[list[int]] = None) -> dict[str, tuple[int, int]]:
    """Resident bytes of the process tree now (of `pids`, its process_tree, when the caller has it)
    by process_label: {label: (processes, bytes)}."""
    totals: dict[str, tuple[int, int]] = {}
    for pid in (process_tree(root_pid) if pids is None else pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                rss = int(f.read().rsplit(")", 1)[1].split()[21]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
        label = process_label(pid)
        count, total = totals.get(label, (0, 0))
        totals[label] = (count + 1, total + rss)
    return totals


def format_peaks(sampler: "PeakRSS") -> str:
    """`peak RSS 1,503 MiB, PSS 1,210 MiB`: the two figures of a sampled run."""
    return f"peak RSS {sampler.peak / 2**20:,.0f} MiB, PSS {sampler.peak_pss / 2**20:,.0f} MiB"


def format_breakdown(breakdown: dict[str, tuple[int, int]]) -> str:
    """`java 512 MiB, python pyspark.daemon x3 410 MiB, ...`, largest first."""
    parts = []
    for label, (count, total) in sorted(breakdown.items(), key=lambda item: -item[1][1]):
        parts.append(f"{label}{f' x{count}' if count > 1 else ''} {total / 2**20:,.0f} MiB")
    return ", ".join(parts)


class PeakRSS(threading.Thread):
    """Samples a process tree's RSS every `interval` seconds until `stop()`; `peak` is the maximum and
    `at_peak` the tree's tree_breakdown() at that sample. `peak_pss` is the maximum of the tree's
    PSS (tree_pss_bytes) over the same samples: the memory the tree holds, each shared
    page once, where the RSS sum counts the pages a forked Python worker shares with its daemon and
    the libraries every process maps once per process. `group_peaks` is each process_label's own
    maximum over the samples, wherever the tree's peak was (the driver's peak while it writes a
    batch may come after the tree's, at the start of a run)."""

    def __init__(self, root_pid: int, interval: float = 0.25):
        super().__init__(name=f"peak-rss-{root_pid}", daemon=True)
        self.root_pid, self.interval, self.peak, self.peak_pss = root_pid, interval, 0, 0
        self.at_peak: dict[str, tuple[int, int]] = {}
        self.group_peaks: dict[str, tuple[int, int]] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            pids = process_tree(self.root_pid)  # one walk of /proc for both figures
            breakdown = tree_breakdown(self.root_pid, pids)
            total = sum(rss for _, rss in breakdown.values())
            if total > self.peak:
                self.peak, self.at_peak = total, breakdown
            for label, (count, rss) in breakdown.items():
                if rss > self.group_peaks.get(label, (0, 0))[1]:
                    self.group_peaks[label] = (count, rss)
            self.peak_pss = max(self.peak_pss, tree_pss_bytes(self.root_pid, pids))
            self._done.wait(self.interval)

    def stop(self) -> int:
        self._done.set()
        self.join(5)
        return self.peak
