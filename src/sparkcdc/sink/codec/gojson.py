"""JSON text exactly as TiCDC's Go encoders write it.

TiCDC writes canal-json rows with easyjson and DDL/watermark/schema files with Go's
encoding/json (or goccy/go-json, which copies it). Both escape HTML (`<` `>` `&` as
`\\u003c`...), U+2028/U+2029, and control characters other than \\n \\r \\t as `\\u00xx`.
Python's `json` differs (`\\b`, `\\f`, no HTML escaping), so string quoting lives here.
"""

from __future__ import annotations

import json
import re
from typing import Any

_HEX = "0123456789abcdef"
_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return "\\u" + "".join(_HEX[(code >> shift) & 0xF] for shift in (12, 8, 4, 0))


# Every character Go escapes: quote, backslash, control characters, HTML and line separators.
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029]')


def quote(text: str) -> str:
    """A JSON string literal as Go writes it (HTML-safe)."""
    if _NEEDS_ESCAPE.search(text) is None:  # the common case, without a per-character loop
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _escape_char(m.group()), text) + '"'


def dumps(value: Any) -> str:
    """Compact JSON like Go's json.Marshal for dicts (insertion order), lists, str, int, bool, None."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, dict):
        return "{" + ",".join(quote(k) + ":" + dumps(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value)


def dumps_indent(value: Any, indent: str = "    ", prefix: str = "") -> str:
    """Like Go's json.MarshalIndent(value, "", indent): `"key": value`, empty containers compact."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = prefix + indent
        items = [inner + quote(k) + ": " + dumps_indent(v, indent, inner) for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + prefix + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = prefix + indent
        items = [inner + dumps_indent(v, indent, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + prefix + "]"
    return dumps(value)
