"""TiDB table-filter rules (`[filter] rules`): `db.tbl` patterns, later rules win.

Supported here: `*`, `?` and `[...]` wildcards, `!` exclusions, backtick-quoted names and
`case-sensitive`. System schemas are never replicated.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from sparkcdc.errors import ErrInvalidReplicaConfig

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_PART = r"(?:`(?:[^`]|``)+`|[^.`\s]+)"
_RULE = re.compile(rf"^(?P<neg>!?)(?P<db>{_PART})\.(?P<tbl>{_PART})$")


@dataclass(frozen=True)
class _Rule:
    exclude: bool
    schema: re.Pattern
    table: re.Pattern


def _compile(part: str, case_sensitive: bool) -> re.Pattern:
    if part.startswith("`"):
        regex = re.escape(part[1:-1].replace("``", "`"))
    else:
        regex = fnmatch.translate(part)
    return re.compile(regex, 0 if case_sensitive else re.IGNORECASE)


class TableFilter:
    def __init__(self, rules: list[str], case_sensitive: bool = False):
        self._rules = []
        for position, rule in enumerate(rules):
            match = _RULE.match(rule.strip())
            if not match:
                raise ErrInvalidReplicaConfig(
                    f"filter.rules[{position}] {rule!r} is not a table filter rule; "
                    "write `schema.table` with optional wildcards and a leading `!` to exclude"
                )
            self._rules.append(
                _Rule(
                    bool(match["neg"]),
                    _compile(match["db"], case_sensitive),
                    _compile(match["tbl"], case_sensitive),
                )
            )

    def match(self, schema: str, table: str) -> bool:
        if schema.lower() in SYSTEM_SCHEMAS:
            return False
        for rule in reversed(self._rules):
            if rule.schema.match(schema) and rule.table.match(table):
                return not rule.exclude
        return False

    def match_event(self, schema: str, table: str) -> bool:
        """Whether an event replicates: a table event by `match`, a database-level one (table
        empty) whenever its schema is not a system schema."""
        if not table:
            return schema.lower() not in SYSTEM_SCHEMAS
        return self.match(schema, table)
