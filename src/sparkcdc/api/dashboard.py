"""The status page served at /dashboard: a static HTML file shipped in the package (static/),
which polls /dashboard/data (server/observer.py's overview) and draws its charts itself."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def dashboard_html() -> bytes:
    return resources.files("sparkcdc.api").joinpath("static", "dashboard.html").read_bytes()
