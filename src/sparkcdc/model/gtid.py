"""GTIDs: the durable identity of an upstream transaction, the same on every server of a topology.

Two flavors, one interface (`GtidState`):

- MariaDB: a GTID is `domain-server-seq` (`0-1-25`). A position (`@@gtid_binlog_pos`,
  `@@gtid_slave_pos`, `mariadb-dump --gtid`) names the last GTID of each domain
  (`0-1-25,1-2-7`); within a domain sequence numbers only grow, so a GTID is "in" a position
  when its domain's sequence number is at or below the position's (`MariaDBPosition`).
  `@@gtid_binlog_state` lists the last sequence number per (domain, server): `MariaDBPosition`
  keeps the newest per domain, which is what a binlog dump needs.
- MySQL: a GTID is `uuid:n`; a GTID set (`@@gtid_executed`) holds intervals per server uuid
  (`3e11fa47-...:1-5:7-9`), and a GTID is in it when one of its uuid's intervals contains n
  (`MySQLGtidSet`). Tagged GTIDs (MySQL 8.3+) are not supported.

A state grows by `add` as transactions are indexed, answers `contains` for a transaction, and
`compare` tells what one server has that another lacks (the divergence checks of a failover,
upstream/switchover.py). Text round-trips: `parse_state(str(state)) == state`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional, Union

from sparkcdc.errors import ErrStartTsInvalid

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_PART = re.compile(r"^(?P<uuid>[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12})"
                         r"(?P<ranges>(?::\d+(?:-\d+)?)+)$")


@dataclass(frozen=True, order=True)
class MariaDBGtid:
    domain: int
    server: int
    seq: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.seq}"

    @classmethod
    def parse(cls, text: str) -> "MariaDBGtid":
        match = _MARIADB_GTID.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a MariaDB GTID (domain-server-seq)")
        return cls(*(int(group) for group in match.groups()))


class MariaDBPosition:
    """The last GTID of each domain: what a MariaDB replica connects with."""

    flavor = "mariadb"

    def __init__(self, gtids: Iterable[MariaDBGtid] = ()):
        self._domains: dict[int, MariaDBGtid] = {}
        for gtid in gtids:
            self._add(gtid)

    def _add(self, gtid: MariaDBGtid) -> None:
        current = self._domains.get(gtid.domain)
        if current is None or gtid.seq >= current.seq:
            self._domains[gtid.domain] = gtid

    def add(self, gtid: str) -> None:
        self._add(MariaDBGtid.parse(gtid))

    def copy(self) -> "MariaDBPosition":
        return MariaDBPosition(self._domains.values())

    def contains(self, gtid: str) -> bool:
        parsed = MariaDBGtid.parse(gtid)
        current = self._domains.get(parsed.domain)
        return current is not None and parsed.seq <= current.seq

    def last(self, domain: int) -> Optional[MariaDBGtid]:
        return self._domains.get(domain)

    def set_domain(self, domain: int, gtid: Optional[MariaDBGtid]) -> None:
        """Make `gtid` the domain's last GTID (None: the position has nothing of the domain)."""
        if gtid is None:
            self._domains.pop(domain, None)
        else:
            self._domains[domain] = gtid

    def named(self) -> list[str]:
        """The GTIDs the position's text names: each domain's last."""
        return [str(g) for _, g in sorted(self._domains.items())]

    @property
    def domains(self) -> tuple[int, ...]:
        return tuple(sorted(self._domains))

    def compare(self, other: "MariaDBPosition") -> tuple[list[str], list[str]]:
        """(what `other` lacks of self, what `other` has beyond self): per domain, self's last
        GTID when other is behind or has another server at that sequence number; other's
        last GTID in a domain self does not have or where other is ahead."""
        lacks, beyond = [], []
        for domain, gtid in sorted(self._domains.items()):
            theirs = other._domains.get(domain)
            if theirs is None or theirs.seq < gtid.seq or (theirs.seq == gtid.seq and theirs.server != gtid.server):
                lacks.append(str(gtid))
        for domain, gtid in sorted(other._domains.items()):
            mine = self._domains.get(domain)
            if mine is None or gtid.seq > mine.seq:
                beyond.append(str(gtid))
        return lacks, beyond

    def past(self, other: "MariaDBPosition") -> list[str]:
        """For `self` the GTID list a binlog file starts with: the GTIDs of the domains `other`
        names that it is past, i.e. what a dump from `other` would need from a purged file."""
        return [str(g) for d, g in sorted(self._domains.items()) if d in other._domains and g.seq > other._domains[d].seq]

    def __str__(self) -> str:
        return ",".join(str(g) for _, g in sorted(self._domains.items()))

    def __eq__(self, other) -> bool:
        return isinstance(other, MariaDBPosition) and self._domains == other._domains

    def __repr__(self) -> str:
        return f"MariaDBPosition({str(self)!r})"

    def __bool__(self) -> bool:
        return bool(self._domains)


class MariaDBBinlogState:
    """MariaDB's @@gtid_binlog_state: the last sequence number per (domain, server). Stricter
    than a position for membership: `0-1-3` is not in a binlog whose domain 0 reached 3 through
    server 2 (`0-2-3`, another transaction)."""

    flavor = "mariadb"

    def __init__(self, text: str = ""):
        self._last: dict[tuple[int, int], int] = {}
        for part in (p.strip() for p in text.replace("\n", "").split(",")):
            if part:
                gtid = MariaDBGtid.parse(part)
                key = (gtid.domain, gtid.server)
                self._last[key] = max(self._last.get(key, 0), gtid.seq)

    def contains(self, gtid: str) -> bool:
        parsed = MariaDBGtid.parse(gtid)
        return self._last.get((parsed.domain, parsed.server), -1) >= parsed.seq

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for (d, s), n in sorted(self._last.items()))

    def __bool__(self) -> bool:
        return bool(self._last)


def _normal_uuid(text: str) -> str:
    bare = text.replace("-", "").lower()
    return f"{bare[:8]}-{bare[8:12]}-{bare[12:16]}-{bare[16:20]}-{bare[20:]}"


class MySQLGtidSet:
    """Intervals of transaction numbers per server uuid: MySQL's gtid_executed."""

    flavor = "mysql"

    def __init__(self, intervals: Optional[dict[str, list[tuple[int, int]]]] = None):
        self._sets: dict[str, list[tuple[int, int]]] = {}
        for uuid, ranges in (intervals or {}).items():
            for low, high in ranges:
                self._add_range(_normal_uuid(uuid), low, high)

    def _add_range(self, uuid: str, low: int, high: int) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in sorted(self._sets.get(uuid, []) + [(low, high)]):
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self._sets[uuid] = merged

    def add(self, gtid: str) -> None:
        uuid, number = _split_mysql_gtid(gtid)
        self._add_range(uuid, number, number)

    def copy(self) -> "MySQLGtidSet":
        return MySQLGtidSet({uuid: list(ranges) for uuid, ranges in self._sets.items()})

    def contains(self, gtid: str) -> bool:
        uuid, number = _split_mysql_gtid(gtid)
        return any(low <= number <= high for low, high in self._sets.get(uuid, ()))

    def compare(self, other: "MySQLGtidSet") -> tuple[list[str], list[str]]:
        """(self minus other, other minus self), each as GTID-set text per uuid."""
        return _difference(self, other), _difference(other, self)

    def past(self, other: "MySQLGtidSet") -> list[str]:
        """For `self` a binlog file's Previous_gtids: what it holds beyond `other` of the servers
        `other` names, i.e. what a dump from `other` would need from a purged file."""
        mine = MySQLGtidSet({uuid: ranges for uuid, ranges in self._sets.items() if other._sets.get(uuid)})
        return _difference(mine, other)

    def last(self, uuid: str) -> Optional[int]:
        ranges = self._sets.get(_normal_uuid(uuid))
        return ranges[-1][1] if ranges else None

    def discard(self, gtid: str) -> None:
        uuid, number = _split_mysql_gtid(gtid)
        kept: list[tuple[int, int]] = []
        for low, high in self._sets.get(uuid, []):
            if low <= number <= high:
                kept += [r for r in ((low, number - 1), (number + 1, high)) if r[0] <= r[1]]
            else:
                kept.append((low, high))
        self._sets[uuid] = kept

    def named(self) -> list[str]:
        """One GTID per server uuid: its highest transaction number (where a set ends)."""
        return [f"{uuid}:{ranges[-1][1]}" for uuid, ranges in sorted(self._sets.items()) if ranges]

    def __str__(self) -> str:
        return ",".join(uuid + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in ranges)
                        for uuid, ranges in sorted(self._sets.items()) if ranges)

    def __eq__(self, other) -> bool:
        return isinstance(other, MySQLGtidSet) and self._sets == other._sets

    def __repr__(self) -> str:
        return f"MySQLGtidSet({str(self)!r})"

    def __bool__(self) -> bool:
        return any(self._sets.values())


def _split_mysql_gtid(gtid: str) -> tuple[str, int]:
    uuid, _, number = gtid.strip().rpartition(":")
    if not uuid or not number.isdigit():
        raise ValueError(f"{gtid!r} is not a MySQL GTID (uuid:number)")
    return _normal_uuid(uuid), int(number)


def _difference(a: MySQLGtidSet, b: MySQLGtidSet) -> list[str]:
    out = []
    for uuid, ranges in sorted(a._sets.items()):
        left: list[tuple[int, int]] = []
        for low, high in ranges:
            pieces = [(low, high)]
            for b_low, b_high in b._sets.get(uuid, ()):
                next_pieces = []
                for p_low, p_high in pieces:
                    if b_high < p_low or b_low > p_high:
                        next_pieces.append((p_low, p_high))
                        continue
                    if p_low < b_low:
                        next_pieces.append((p_low, b_low - 1))
                    if b_high < p_high:
                        next_pieces.append((b_high + 1, p_high))
                pieces = next_pieces
            left += pieces
        if left:
            out.append(str(MySQLGtidSet({uuid: left})))
    return out


GtidState = Union[MariaDBPosition, MySQLGtidSet]


def parse_state(text: str, flavor: Optional[str] = None) -> GtidState:
    """A GTID position or set from its text: MariaDB `0-1-25,1-2-7` (several GTIDs of one domain
    keep the newest, as in @@gtid_binlog_state), MySQL `uuid:1-5:7,uuid2:3`. `flavor` decides an
    empty text (MariaDB when None). Raises ValueError for anything else."""
    parts = [part.strip() for part in (text or "").replace("\n", "").split(",") if part.strip()]
    if not parts:
        return MySQLGtidSet() if flavor == "mysql" else MariaDBPosition()
    if all(_MARIADB_GTID.match(part) for part in parts):
        return MariaDBPosition(MariaDBGtid.parse(part) for part in parts)
    intervals: dict[str, list[tuple[int, int]]] = {}
    for part in parts:
        match = _MYSQL_PART.match(part)
        if not match:
            raise ValueError(f"{part!r} is neither a MariaDB GTID (domain-server-seq) nor a MySQL GTID set (uuid:1-5)")
        for number_range in match["ranges"].strip(":").split(":"):
            low, _, high = number_range.partition("-")
            intervals.setdefault(match["uuid"], []).append((int(low), int(high or low)))
    return MySQLGtidSet(intervals)


def newer(state: GtidState, than: GtidState) -> Optional[bool]:
    """Whether GTID state `state` is past `than` (True), the same (False), or behind or beside it
    (None): how checkpoints written on different captures, or servers, are ordered."""
    lacks, beyond = than.compare(state)
    if lacks:
        return None
    return bool(beyond)


def empty_state(flavor: str) -> GtidState:
    return MySQLGtidSet() if flavor == "mysql" else MariaDBPosition()


def state_flavor(gtid: str) -> str:
    """The flavor of one GTID's text."""
    return "mariadb" if _MARIADB_GTID.match(gtid.strip()) else "mysql"


def parse_start(text: str) -> GtidState:
    """A `--start-ts` given as a GTID position or set, with ErrStartTsInvalid for bad text."""
    try:
        return parse_state(text)
    except ValueError:
        raise ErrStartTsInvalid(
            f"start {text!r} is not a TSO, a GTID (MariaDB 0-1-25 or a position 0-1-25,1-2-7; MySQL uuid:1-25) "
            "or FILE:POS") from None
