"""TiDB table-filter rules (`[filter] rules`, event-filter and selector `matcher`s).

The syntax is TiDB's (util/table-filter, docs table-filter.md): `schema.table` where each part is
a wildcard pattern (`*`, `?`, `[a-z]`, `[!a-z]`, `\\` escapes), a quoted name (`` `a.b` `` or
`"a.b"`, matched verbatim) or a `/regex/`; a leading `!` excludes, `#` starts a comment and
`@path` imports one rule per line from a file. Later rules win; no matching rule means not
matched. Matching is case-insensitive unless `case-sensitive` is set. System schemas are never
replicated, whatever the rules say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from sparkcdc.errors import ErrFilterRuleInvalid

# TiCDC's filter.IsSysSchema: these schemas never replicate (tidb_cdc holds syncpoints).
SYSTEM_SCHEMAS = frozenset(
    {"mysql", "information_schema", "performance_schema", "sys", "metrics_schema",
     "inspection_schema", "tidb_cdc"}
)

_REGEX_PART = re.compile(r"/(?:\\.|[^/])+/")
_DOUBLE_QUOTED = re.compile(r'"(?:""|[^"])+"')
_BACKQUOTED = re.compile(r"`(?:``|[^`])+`")
_WILDCARD_RANGE = re.compile(r"\[!?(?:\\[^0-9a-zA-Z]|[^\\\]])+\]")


class FilterRuleError(ErrFilterRuleInvalid):
    """A malformed rule; the message names the rule and the 1-based character position."""


Matcher = Callable[[str], bool]


@dataclass(frozen=True)
class _Rule:
    exclude: bool
    schema: Matcher
    table: Matcher
    all_tables: bool = False  # the table pattern is a bare `*`


class _RuleParser:
    """Parses one rule text. `where` names the rule in errors (`filter.rules[2]`)."""

    def __init__(self, where: str, text: str, case_sensitive: bool):
        self.where = where
        self.text = text
        self.flags = 0 if case_sensitive else re.IGNORECASE
        self.case_sensitive = case_sensitive

    def error(self, position: int, message: str) -> FilterRuleError:
        return FilterRuleError(
            f"{self.where} {self.text!r} is not a valid table filter rule: at position "
            f"{position + 1}: {message}; see TiDB's table-filter syntax (`schema.table`, "
            "wildcards `*` `?` `[a-z]`, `!` to exclude, quote names with backticks)"
        )

    def parse(self) -> Optional[_Rule]:
        text = self.text
        start = len(text) - len(text.lstrip(" \t"))
        end = len(text.rstrip(" \t"))
        if start >= end or text[start] == "#":
            return None
        exclude = text[start] == "!"
        position = start + 1 if exclude else start
        schema, position = self.pattern(position, end, needs_dot=True)
        if position >= end:
            raise self.error(position, "wrong table pattern: missing '.' and table pattern")
        if text[position] != ".":
            raise self.error(position, "syntax error: missing '.' between schema and table patterns")
        table_start = position + 1
        table, position = self.pattern(table_start, end, needs_dot=True)
        if position != end:
            raise self.error(position, "syntax error: stray characters after table pattern")
        return _Rule(exclude, schema, table, text[table_start:end] == "*")

    def pattern(self, position: int, end: int, needs_dot: bool) -> tuple[Matcher, int]:
        text = self.text[:end]
        if position >= end:
            raise self.error(position, "syntax error: missing pattern")
        first = text[position]
        if first == "/":
            found = _REGEX_PART.match(text, position)
            if not found:
                raise self.error(position, "syntax error: incomplete regexp")
            try:
                regex = re.compile(text[position + 1:found.end() - 1], self.flags)
            except re.error as exc:
                raise self.error(position, f"invalid regexp: {exc}") from None
            return (lambda name: regex.search(name) is not None), found.end()
        if first in "\"`":
            found = (_DOUBLE_QUOTED if first == '"' else _BACKQUOTED).match(text, position)
            if not found:
                raise self.error(position, "syntax error: incomplete quoted identifier")
            name = text[position + 1:found.end() - 1].replace(first * 2, first)
            return self.literal(name), found.end()
        return self.wildcard(position, end, needs_dot)

    def literal(self, name: str) -> Matcher:
        if self.case_sensitive:
            return lambda candidate: candidate == name
        folded = name.lower()
        return lambda candidate: candidate.lower() == folded

    def wildcard(self, position: int, end: int, needs_dot: bool) -> tuple[Matcher, int]:
        text = self.text
        literal: list[str] = []
        regex: list[str] = []
        is_literal = True
        i = position
        while i < end:
            c = text[i]
            if c == "\\":
                if i == end - 1:
                    raise self.error(i, "syntax error: cannot place \\ at end of line")
                escaped = text[i + 1]
                if escaped.isascii() and escaped.isalnum():
                    raise self.error(i, f"cannot escape a letter or number (\\{escaped}), "
                                        "it is reserved for future extension")
                literal.append(escaped)
                regex.append(re.escape(escaped))
                i += 2
            elif c == ".":
                if needs_dot:
                    break
                raise self.error(i, "unexpected special character '.'")
            elif c == "*":
                is_literal = False
                regex.append(".*")
                i += 1
            elif c == "?":
                is_literal = False
                regex.append(".")
                i += 1
            elif c == "[":
                is_literal = False
                found = _WILDCARD_RANGE.match(text[:end], i)
                if not found:
                    raise self.error(i, "syntax error: failed to parse character class")
                body = text[i + 1:found.end() - 1]
                if body.startswith("!"):
                    regex.append("[^" + body[1:] + "]")
                elif body.startswith("^"):
                    regex.append("[\\^" + body[1:] + "]")
                else:
                    regex.append("[" + body + "]")
                i = found.end()
            elif c in "$_" or (c.isascii() and c.isalnum()) or not c.isascii():
                literal.append(c)
                regex.append(c)
                i += 1
            else:
                raise self.error(i, f"unexpected special character {c!r}")
        if i == position:
            raise self.error(i, "syntax error: missing pattern")
        if is_literal:
            return self.literal("".join(literal)), i
        try:
            compiled = re.compile("".join(regex), self.flags | re.DOTALL)
        except re.error as exc:
            raise self.error(position, f"invalid pattern: {exc}") from None
        return (lambda name: compiled.fullmatch(name) is not None), i


def _expand_imports(rules: Sequence[str], where: str) -> Iterable[tuple[str, str]]:
    """(name for errors, rule text) for each rule, with `@file` imports read line by line."""
    for position, rule in enumerate(rules):
        name = f"{where}[{position}]"
        stripped = rule.strip(" \t")
        if not stripped.startswith("@"):
            yield name, rule
            continue
        path = stripped[1:]
        try:
            with open(path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            raise FilterRuleError(f"{name} {rule!r}: cannot open filter file: {exc}") from None
        for line_number, line in enumerate(lines, start=1):
            if line.strip(" \t").startswith("@"):
                raise FilterRuleError(f"{name} {rule!r}: at {path}:{line_number}: importing filter "
                                      "files recursively is not allowed")
            yield f"{name} ({path}:{line_number})", line


class TableFilter:
    """`TableFilter(rules, case_sensitive).match(schema, table)`; `where` names rules in errors."""

    def __init__(self, rules: Sequence[str], case_sensitive: bool = False,
                 where: str = "filter.rules"):
        if isinstance(rules, str):
            raise FilterRuleError(f"`{where}` must be an array of rules, got a string")
        self.case_sensitive = case_sensitive
        self._rules: list[_Rule] = []
        for name, text in _expand_imports(rules, where):
            rule = _RuleParser(name, text, case_sensitive).parse()
            if rule is not None:
                self._rules.append(rule)

    def match(self, schema: str, table: str) -> bool:
        if schema.lower() in SYSTEM_SCHEMAS:
            return False
        return self.match_rules(schema, table)

    def match_rules(self, schema: str, table: str) -> bool:
        """The rules alone, without the system-schema exclusion (event-filter matchers)."""
        for rule in reversed(self._rules):
            if rule.schema(schema) and rule.table(table):
                return not rule.exclude
        return False

    def match_schema(self, schema: str) -> bool:
        """Whether some table of `schema` may replicate (TiDB's MatchSchema): the last rule whose
        schema pattern matches decides; an exclusion drops the schema only for `!schema.*`."""
        if schema.lower() in SYSTEM_SCHEMAS:
            return False
        for rule in reversed(self._rules):
            if rule.schema(schema):
                return not rule.exclude or not rule.all_tables
        return False

    def match_event(self, schema: str, table: str) -> bool:
        """Whether an event replicates: a table event by `match`, a database-level one (table
        empty) by `match_schema`."""
        if not table:
            return self.match_schema(schema)
        return self.match(schema, table)
