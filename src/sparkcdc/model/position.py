"""Binlog coordinates. A transaction starts at its GTID event and ends after its commit event."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkcdc.errors import ErrBinlogPositionInvalid

_FILE_POS = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<pos>\d+)$")


@dataclass(frozen=True, order=True)
class BinlogPosition:
    """A point in the binlog: the file name and the byte offset of the next event."""

    file: str
    pos: int

    @property
    def sequence(self) -> int:
        """The numeric suffix of the file, which orders files (`mysql-bin.000012` -> 12)."""
        return int(self.file.rsplit(".", 1)[1])

    def key(self) -> tuple[int, int]:
        return (self.sequence, self.pos)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    @classmethod
    def parse(cls, text: str) -> "BinlogPosition":
        match = _FILE_POS.match(text.strip())
        if not match:
            raise ErrBinlogPositionInvalid(
                f"binlog position {text!r} is not FILE:POS (e.g. mysql-bin.000003:4); "
                "give a TSO, a GTID set or FILE:POS"
            )
        return cls(match["file"], int(match["pos"]))
