"""The last minutes of each changefeed's lag and throughput, for the status page's chart.

`StatusHistory.record` takes one sample per changefeed (its checkpoint lag and the rows its sink
has written in total) every `interval` seconds from the server's sampler thread; `series` returns
(time, lag seconds, rows/s) points over the last `window` seconds, the rate taken between
consecutive samples. Memory is bounded: at most window / interval samples per changefeed, and a
changefeed not sampled for a whole window is dropped. Nothing persists: a restarted server starts
an empty chart.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Optional

DEFAULT_INTERVAL = 2.0
DEFAULT_WINDOW = 600.0


@dataclass(frozen=True)
class Sample:
    time: float  # seconds since the epoch
    lag: Optional[float]  # checkpoint lag in seconds; None when the changefeed is not running
    rows: Optional[int]  # rows written by its sink on this capture so far; None when it runs elsewhere


@dataclass(frozen=True)
class Point:
    time: float
    lag: Optional[float]
    rows_per_second: Optional[float]


class StatusHistory:
    def __init__(self, window: float = DEFAULT_WINDOW, interval: float = DEFAULT_INTERVAL):
        self.window, self.interval = window, interval
        self._samples: dict[tuple[str, str], collections.deque[Sample]] = {}
        self._lock = threading.Lock()

    def record(self, now: float, samples: dict[tuple[str, str], Sample]) -> None:
        capacity = int(self.window / self.interval) + 2
        with self._lock:
            for key, sample in samples.items():
                self._samples.setdefault(key, collections.deque(maxlen=capacity)).append(sample)
            for key in [key for key, kept in self._samples.items() if kept[-1].time < now - self.window]:
                del self._samples[key]

    def series(self, key: tuple[str, str], now: float) -> list[Point]:
        with self._lock:
            samples = [s for s in self._samples.get(key, ()) if s.time >= now - self.window]
        points = []
        for previous, sample in zip([None, *samples], samples):
            rate = None
            if previous is not None and sample.rows is not None and previous.rows is not None:
                elapsed = sample.time - previous.time
                if elapsed > 0 and sample.rows >= previous.rows:  # a restarted counter gives no rate
                    rate = (sample.rows - previous.rows) / elapsed
            points.append(Point(sample.time, sample.lag, rate))
        return points
