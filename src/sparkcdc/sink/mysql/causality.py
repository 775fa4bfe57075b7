"""Conflict detection: transactions that share a key run in order, the rest in parallel.

As TiCDC's pkg/causality: every PK/UK value of a row's pre and post images becomes a key
(`value\\0...` + index number + table id, FNV-1a 32, into a fixed number of slots, so memory is
bounded and a hash collision only costs parallelism). String values are folded for
case/accent-insensitive collations. An index holding NULL gives no key; a table without any
key gives one key for the whole table, so its transactions are serialized.

`ConflictDetector.acquire` places a transaction on the one worker that still runs transactions
it conflicts with (after them, since a worker runs its queue in order), on the least busy worker
when there is none, and waits while its conflicts are still running on more than one worker.
"""

from __future__ import annotations

import struct
import threading
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from sparkcdc.model.events import BINARY_TYPES, RowChange, TableInfo, Value

DEFAULT_SLOTS = 16384
_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193
_CASE_SENSITIVE_SUFFIXES = ("_bin", "_cs")


def fnv32a(data: bytes) -> int:
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def fold_text(text: str) -> str:
    """A string as an insensitive collation compares it: case- and accent-folded, trailing spaces
    dropped. Folding more than the collation would only costs parallelism, never order."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).rstrip(" ")


@dataclass(frozen=True)
class KeySpace:
    """What makes two rows of one table conflict: its unique indexes and which columns fold."""

    table_id: int
    indexes: tuple[tuple[int, ...], ...]  # column positions of the handle key and each unique key
    folded: frozenset[int]  # positions of strings compared case-insensitively

    @classmethod
    def for_table(
        cls,
        info: TableInfo,
        unique_keys: Sequence[Sequence[str]] = (),
        collations: Optional[dict[str, Optional[str]]] = None,
    ) -> "KeySpace":
        """Keys from the handle key plus `unique_keys` (e.g. read from the downstream); a string
        column folds unless its collation (when known) is binary or case-sensitive."""
        names = info.column_names
        indexes: list[tuple[int, ...]] = []
        for key in [info.handle_key, *unique_keys]:
            if key and all(n in names for n in key):
                positions = tuple(names.index(n) for n in key)
                if positions not in indexes and not any(info.columns[p].generated for p in positions):
                    indexes.append(positions)
        folded = set()
        for position, column in enumerate(info.columns):
            if column.is_binary or column.mysql_type in BINARY_TYPES:
                continue
            if column.mysql_type not in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext",
                                         "enum", "set"):
                continue
            collation = (collations or {}).get(column.name)
            if collation and collation.lower().endswith(_CASE_SENSITIVE_SUFFIXES):
                continue
            folded.add(position)
        return cls(info.table_id, tuple(indexes), frozenset(folded))

    def image_keys(self, image: Optional[Sequence[Value]]) -> list[int]:
        if image is None:
            return []
        keys = []
        for number, positions in enumerate(self.indexes):
            values = [image[p] for p in positions]
            if any(v is None for v in values):
                continue  # NULLs never conflict in a unique index
            text = "".join((fold_text(v) if p in self.folded else v) + "\0" for p, v in zip(positions, values))
            data = text.encode("utf-8", "surrogatepass") + struct.pack(">qq", number, self.table_id)
            keys.append(fnv32a(data))
        return keys

    def transaction_keys(self, rows: Iterable[RowChange]) -> set[int]:
        """Every key of every pre and post image; the table's own key when it has no index."""
        if not self.indexes:
            return {fnv32a(struct.pack(">q", self.table_id))}
        keys: set[int] = set()
        for row in rows:
            keys.update(self.image_keys(row.before))
            keys.update(self.image_keys(row.after))
        return keys


@dataclass(frozen=True)
class Ticket:
    worker: int
    sequence: int  # position in that worker's queue, 1-based


class ConflictDetector:
    """Assigns transactions to `worker_count` in-order workers, keeping conflicting ones in order."""

    def __init__(self, worker_count: int, slots: int = DEFAULT_SLOTS):
        if worker_count < 1:
            raise ValueError("worker_count must be at least 1")
        self.worker_count = worker_count
        self._slots: list[Optional[tuple[int, int]]] = [None] * slots
        self._assigned = [0] * worker_count
        self._finished = [0] * worker_count
        self._changed = threading.Condition()
        self._next_worker = 0

    def _blocking_workers(self, slots: Iterable[int]) -> set[int]:
        workers = set()
        for slot in slots:
            holder = self._slots[slot]
            if holder is not None and self._finished[holder[0]] < holder[1]:
                workers.add(holder[0])
        return workers

    def acquire(self, keys: Iterable[int], timeout: Optional[float] = None) -> Ticket:
        """Reserve a place for a transaction with `keys`; blocks while it depends on 2+ workers."""
        slots = sorted({key % len(self._slots) for key in keys})
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._blocking_workers(slots)) <= 1, timeout):
                raise TimeoutError("conflicting transactions did not finish in time")
            blocking = self._blocking_workers(slots)
            worker = blocking.pop() if blocking else self._least_busy()
            self._assigned[worker] += 1
            ticket = Ticket(worker, self._assigned[worker])
            for slot in slots:
                self._slots[slot] = (worker, ticket.sequence)
            return ticket

    def _least_busy(self) -> int:
        # Round-robin among the least loaded, so idle workers share the work.
        loads = [self._assigned[w] - self._finished[w] for w in range(self.worker_count)]
        lowest = min(loads)
        for offset in range(self.worker_count):
            worker = (self._next_worker + offset) % self.worker_count
            if loads[worker] == lowest:
                self._next_worker = (worker + 1) % self.worker_count
                return worker
        raise AssertionError("unreachable")

    def release(self, ticket: Ticket) -> None:
        """A worker finished `ticket` (workers finish their tickets in order)."""
        with self._changed:
            self._finished[ticket.worker] = max(self._finished[ticket.worker], ticket.sequence)
            self._changed.notify_all()

    def pending(self) -> int:
        with self._changed:
            return sum(a - f for a, f in zip(self._assigned, self._finished))

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until every acquired ticket is released; False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: all(a == f for a, f in zip(self._assigned, self._finished)), timeout)
