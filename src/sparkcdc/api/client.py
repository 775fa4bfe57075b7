"""A small Open API v2 client (urllib) for the CLI; errors come back as SparkCDCError."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any, Optional
from urllib.parse import quote, urlencode

from sparkcdc import errors


class RemoteError(errors.SparkCDCError):
    """An error the server reported; keeps the server's code and HTTP status."""

    def __init__(self, code: str, message: str, http_status: int):
        super().__init__(message)
        self.code = code
        self.http_status = http_status


class APIClient:
    """`ssl_context` for an https server (CA, client certificate); `user`/`password` for basic auth."""

    def __init__(self, server: str, timeout: float = 30.0, ssl_context: Optional[ssl.SSLContext] = None,
                 user: str = "", password: str = ""):
        server = server.rstrip("/")
        if "://" not in server:
            server = ("https://" if ssl_context is not None else "http://") + server
        self.server = server
        self.timeout = timeout
        self._ssl_context = ssl_context
        self._authorization = ("Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()) if user else None

    def request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                server: Optional[str] = None, raw: bool = False) -> Any:
        """The route's JSON answer (its bytes when `raw`), from `server` (another capture of the
        cluster, same TLS and credentials) or this client's server."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = (server or self.server) + path + (("?" + urlencode(params)) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._authorization:
            req.add_header("Authorization", self._authorization)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl_context) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise _remote_error(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise errors.ErrServerUnreachable(
                f"cannot reach the sparkcdc server at {self.server} ({reason}); is `sparkcdc server` "
                f"running there? Pass its address with --server") from None
        if raw:
            return payload
        return json.loads(payload) if payload else {}

    # -- the routes the CLI uses ---------------------------------------------------------------
    def create_changefeed(self, body: dict, namespace: str) -> dict:
        return self.request("POST", "/api/v2/changefeeds", body, {"namespace": namespace})

    def list_changefeeds(self, state: str = "", namespace: str | None = None) -> dict:
        return self.request("GET", "/api/v2/changefeeds", query={"state": state or None, "namespace": namespace})

    def get_changefeed(self, changefeed_id: str, namespace: str) -> dict:
        return self.request("GET", _cf(changefeed_id), query={"namespace": namespace})

    def changefeed_status(self, changefeed_id: str, namespace: str) -> dict:
        return self.request("GET", _cf(changefeed_id) + "/status", query={"namespace": namespace})

    def update_changefeed(self, changefeed_id: str, body: dict, namespace: str) -> dict:
        return self.request("PUT", _cf(changefeed_id), body, {"namespace": namespace})

    def delete_changefeed(self, changefeed_id: str, namespace: str) -> dict:
        return self.request("DELETE", _cf(changefeed_id), query={"namespace": namespace})

    def pause_changefeed(self, changefeed_id: str, namespace: str) -> dict:
        return self.request("POST", _cf(changefeed_id) + "/pause", {}, {"namespace": namespace})

    def resume_changefeed(self, changefeed_id: str, overwrite_checkpoint_ts: int | str, namespace: str) -> dict:
        return self.request("POST", _cf(changefeed_id) + "/resume",
                            {"overwrite_checkpoint_ts": overwrite_checkpoint_ts}, {"namespace": namespace})

    def metrics(self, address: Optional[str] = None) -> str:
        """The Prometheus metrics of this server, or of the capture at `address` (host:port)."""
        server = None
        if address is not None:
            server = self.server.split("://", 1)[0] + "://" + address
        return self.request("GET", "/metrics", server=server, raw=True).decode("utf-8")

    def list_captures(self) -> dict:
        return self.request("GET", "/api/v2/captures")

    def query_tso(self) -> dict:
        return self.request("POST", "/api/v2/tso", {})

    def list_processors(self) -> dict:
        return self.request("GET", "/api/v2/processors")

    def get_processor(self, changefeed_id: str, capture_id: str, namespace: str) -> dict:
        return self.request("GET", "/api/v2/processors/" + quote(changefeed_id, safe="") + "/"
                            + quote(capture_id, safe=""), query={"namespace": namespace})

    def changefeed_synced(self, changefeed_id: str, namespace: str) -> dict:
        return self.request("GET", _cf(changefeed_id) + "/synced", query={"namespace": namespace})

    def unsafe_metadata(self) -> list:
        return self.request("GET", "/api/v2/unsafe/metadata")


def _cf(changefeed_id: str) -> str:
    return "/api/v2/changefeeds/" + quote(changefeed_id, safe="")


def _remote_error(status: int, payload: bytes) -> errors.SparkCDCError:
    try:
        document = json.loads(payload)
        return RemoteError(document["error_code"], document["error_msg"], status)
    except (ValueError, KeyError, TypeError):
        text = payload.decode(errors="replace")[:500]
        return RemoteError("SPARKCDC:ErrInternal", f"server answered HTTP {status}: {text}", status)
