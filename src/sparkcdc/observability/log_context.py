"""Which changefeed a log line belongs to, without passing it to every logger call.

The changefeed runner marks the threads it runs a changefeed's work on (the batch function, the
writer thread, the query's watcher) with `changefeed_context`; the JSON log format
(cli/logs.py) writes it as the line's `changefeed` field. A record's own `extra={"changefeed":
...}` wins. A thread starts with no changefeed: contexts are per thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

_CHANGEFEED: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("sparkcdc_changefeed", default=None)


def current_changefeed() -> Optional[str]:
    """`<namespace>/<id>` of the changefeed this thread works for, or None."""
    return _CHANGEFEED.get()


@contextlib.contextmanager
def changefeed_context(namespace: str, changefeed_id: str) -> Iterator[None]:
    token = _CHANGEFEED.set(f"{namespace}/{changefeed_id}")
    try:
        yield
    finally:
        _CHANGEFEED.reset(token)
