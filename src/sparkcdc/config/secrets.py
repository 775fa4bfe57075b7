"""What counts as a secret, and how to show text, URIs and documents without one.

sparkcdc never shows a password, secret key or token: not in API answers, error messages,
metadata dumps or log lines at any level. A secret is recognised as
- the password in a URI's user info (`scheme://user:password@host`),
- the value of a URI query parameter in SENSITIVE_PARAMS (TiCDC's MaskSinkURI family),
- the value of a key that names a secret (`password=...`, `"sasl_password": "..."`,
  `secret_access_key='...'`) in free text such as a repr, a config dict or a JSON document,
- the quoted password of an SQL statement from the binlog (`IDENTIFIED BY '...'`, `PASSWORD('...')`),
and replaced by MASK. Code keeps secrets out of messages in the first place (masked URIs,
`field(repr=False)`); masking free text is the net under that, applied to every log line
(sparkcdc.cli.logs) and every API error message.
"""

from __future__ import annotations

import json
import re
from typing import Any

MASK = "xxxxx"

# Query parameters that carry a secret (TiCDC masks the same family in MaskSinkURI).
SENSITIVE_PARAMS = frozenset({
    "password", "sasl-password", "sasl-gssapi-password", "sas-token", "account-key",
    "secret-access-key", "access-key", "session-token", "token", "credentials-file",
    "ssl-key", "key", "oauth2-private-key", "auth-token", "basic-password",
})

# Key names that hold a secret, in documents (replica config, metadata) and in free text.
_SECRET_NAME = r"password|passwd|secret|token|credential|private[-_.]?key|account[-_.]?key|access[-_.]?key"
_SECRET_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)

_URI_USERINFO = re.compile(r"([a-zA-Z][\w+.-]*://[^:/@\s'\"]+:)([^\s'\"]+)(@)")
_URI_PARAM = re.compile(
    r"([?&;](?:" + "|".join(re.escape(name) for name in sorted(SENSITIVE_PARAMS, key=len, reverse=True))
    + r")=)([^&\s'\"#]+)", re.IGNORECASE)
_KEY_VALUE = re.compile(
    r"""(["']?[\w.-]*(?:""" + _SECRET_NAME + r""")["']?\s*[:=]\s*)"""
    # MySQL's "(using password: YES)" says whether one was sent, not what it is: keep it.
    r"""(?!(?:YES|NO)\b)(?:(["'])(?:(?!\2).)+\2|(?!["'])[^\s,;&'"})\]]+)""", re.IGNORECASE)


_SQL_PASSWORD = re.compile(
    r"""((?:IDENTIFIED\s+(?:WITH\s+\S+\s+)?(?:BY|AS)(?:\s+PASSWORD)?|PASSWORD\s*\()\s*)(["'])(?:(?!\2).)*\2""",
    re.IGNORECASE)


def mask_text(text: str) -> str:
    """`text` with every secret it shows (see the module docstring) replaced by MASK."""
    text = _URI_USERINFO.sub(r"\1" + MASK + r"\3", text)
    text = _URI_PARAM.sub(r"\1" + MASK, text)
    text = _SQL_PASSWORD.sub(_mask_value, text)
    return _KEY_VALUE.sub(_mask_value, text)


def _mask_value(match: re.Match) -> str:
    """The match's prefix (group 1) with its value masked inside the same quotes (group 2)."""
    quote = match.group(2) or ""
    return f"{match.group(1)}{quote}{MASK}{quote}"


def mask_document(document: Any) -> Any:
    """A copy of a JSON document with secret-named values and URI credentials replaced by MASK."""
    if isinstance(document, dict):
        masked = {}
        for key, value in document.items():
            if isinstance(value, str) and value and _SECRET_KEY.search(str(key)):
                masked[key] = MASK
            elif isinstance(value, str):
                masked[key] = mask_text(value)
            else:
                masked[key] = mask_document(value)
        return masked
    if isinstance(document, list):
        return [mask_document(value) for value in document]
    if isinstance(document, str):
        return mask_text(document)
    return document


def mask_stored_value(text: str) -> str:
    """`mask_document` for a stored value that is JSON, else `mask_text`."""
    try:
        return json.dumps(mask_document(json.loads(text)), sort_keys=True)
    except (ValueError, TypeError):
        return mask_text(text)
