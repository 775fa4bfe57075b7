"""Progress of long work (`sparkcdc diff`, `redo apply`, the consumers, a snapshot): how much is
done, the rate, and an ETA when the total is known.

On a terminal the line is redrawn in place at most every `refresh_every` seconds; whatever the
output, a log line says the same every `log_every` seconds, and `finish` logs the total. The
caller advances it per unit of work it already has (a chunk, a file, a batch), never per row.
The rate is the average since the start, so it is steady enough for an ETA.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable, Optional, TextIO

log = logging.getLogger(__name__)

DEFAULT_LOG_EVERY = 10.0
DEFAULT_REFRESH_EVERY = 0.5


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    def __init__(self, what: str, unit: str = "rows", total: Optional[int] = None,
                 logger: logging.Logger = log, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic, log_every: float = DEFAULT_LOG_EVERY,
                 refresh_every: float = DEFAULT_REFRESH_EVERY, terminal: Optional[bool] = None):
        self.what, self.unit, self.total = what, unit, total
        self._logger = logger
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._log_every, self._refresh_every = log_every, refresh_every
        if terminal is None:
            isatty = getattr(self._stream, "isatty", None)
            terminal = bool(isatty and isatty())
        self._terminal = terminal
        self._lock = threading.Lock()
        self.done = 0
        self._started = clock()
        self._last_log = self._started
        self._last_draw = float("-inf")
        self._drawn = 0  # characters of the line drawn last

    def set_total(self, total: Optional[int]) -> None:
        with self._lock:
            self.total = total

    def advance(self, amount: int = 1) -> None:
        with self._lock:
            self.done += amount
            now = self._clock()
            if self._terminal and now - self._last_draw >= self._refresh_every:
                self._draw(self._text(now))
                self._last_draw = now
            if now - self._last_log >= self._log_every:
                self._last_log = now
                self._logger.info("%s: %s", self.what, self._text(now))

    def text(self) -> str:
        with self._lock:
            return self._text(self._clock())

    def finish(self) -> None:
        """Log (and draw) the final line: what was done, in how long, at which rate."""
        with self._lock:
            now = self._clock()
            elapsed = max(now - self._started, 1e-9)
            text = f"{self.done:,} {self.unit} in {format_duration(elapsed)} ({self.done / elapsed:,.0f} {self.unit}/s)"
            if self._terminal:
                self._draw(text)
                self._stream.write("\n")
                self._stream.flush()
            self._logger.info("%s: done, %s", self.what, text)

    def _text(self, now: float) -> str:
        elapsed = now - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total:
            share = min(100.0, 100.0 * self.done / self.total)
            text = f"{self.done:,} / {self.total:,} {self.unit} ({share:.1f}%), {rate:,.0f} {self.unit}/s"
            if rate > 0 and self.done < self.total:
                text += f", ETA {format_duration((self.total - self.done) / rate)}"
            return text
        return f"{self.done:,} {self.unit}, {rate:,.0f} {self.unit}/s"

    def _draw(self, text: str) -> None:
        line = f"{self.what}: {text}"
        self._stream.write("\r" + line + " " * max(0, self._drawn - len(line)))
        self._stream.flush()
        self._drawn = len(line)
