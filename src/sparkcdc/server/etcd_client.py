"""The few etcd v3 calls sparkcdc needs, over etcd3gw's JSON gateway, with explicit timeouts.

etcd3gw's own helpers default to no timeout and hide revisions; everything here goes through
its public `Etcd3Client.post` with raw v3 requests (keys and values base64 as the gateway wants
them, encoded here) so each call has a deadline and every read returns the key's create and mod
revisions, which fencing compares against. A timed-out write may still be
applied later: callers fence writes with revision compares instead of trusting a timeout.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

from etcd3gw import exceptions as etcd_exceptions
from etcd3gw.client import Etcd3Client

from sparkcdc.errors import ErrEtcdUnavailable


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0

    def json(self) -> Any:
        return json.loads(self.value)


# -- compares and operations, as v3 JSON --------------------------------------------------------
def _encode(data: bytes | str) -> str:
    """Bytes (a str as UTF-8) in the gateway's base64."""
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode("ascii")


def _decode(data: str) -> bytes:
    return base64.b64decode(data)


def _prefix_end(prefix: str) -> bytes:
    """The range end that makes a range of `prefix` cover every key starting with it (etcd's
    clientv3.GetPrefixRangeEnd): the prefix with its last byte incremented."""
    end = bytearray(prefix.encode())
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return b"\0"  # every key
    end[-1] += 1
    return bytes(end)


def key_exists_at(key: str, create_revision: int) -> dict:
    """The key exists and was created at `create_revision` (a lease-bound key of ours)."""
    return {"key": _encode(key), "result": "EQUAL", "target": "CREATE", "create_revision": create_revision}


def key_missing(key: str) -> dict:
    return {"key": _encode(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}


def key_unchanged(key: str, mod_revision: int) -> dict:
    return {"key": _encode(key), "result": "EQUAL", "target": "MOD", "mod_revision": mod_revision}


def put_op(key: str, value: bytes | str, lease: int = 0) -> dict:
    request: dict = {"key": _encode(key), "value": _encode(value)}
    if lease:
        request["lease"] = lease
    return {"request_put": request}


def delete_op(key: str) -> dict:
    return {"request_delete_range": {"key": _encode(key)}}


class EtcdClient:
    """One etcd endpoint (`http://host:port`); every call raises ErrEtcdUnavailable on failure."""

    def __init__(self, endpoint: str, timeout: float = 3.0):
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        self.endpoint = f"{url.scheme}://{url.hostname}:{url.port or 2379}"
        self.timeout = timeout
        self._host, self._port, self._scheme = url.hostname, url.port or 2379, url.scheme

    def _client(self, timeout: Optional[float]) -> Etcd3Client:
        # A client per call: requests sessions are not thread-safe, and a stuck keepalive must
        # never wait behind a slow range on the same connection.
        return Etcd3Client(host=self._host, port=self._port, protocol=self._scheme,
                           timeout=timeout or self.timeout, api_path="/v3/")

    def call(self, path: str, request: dict, timeout: Optional[float] = None) -> dict:
        client = self._client(timeout)
        try:
            return client.post(client.get_url(path), data=json.dumps(request))
        except etcd_exceptions.Etcd3Exception as exc:
            raise ErrEtcdUnavailable(
                f"etcd {self.endpoint} {path} failed: {exc.__class__.__name__}: {getattr(exc, 'detail_text', exc)}; "
                "check that etcd is up and reachable (`--pd`)") from None
        finally:
            client.session.close()

    # -- kv ------------------------------------------------------------------------------------
    def get(self, key: str) -> Optional[KeyValue]:
        kvs = self._range({"key": _encode(key)})
        return kvs[0] if kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        return self._range({"key": _encode(prefix), "range_end": _encode(_prefix_end(prefix)),
                            "sort_order": "ASCEND", "sort_target": "KEY"})

    def _range(self, request: dict) -> list[KeyValue]:
        response = self.call("/kv/range", request)
        return [_key_value(kv) for kv in response.get("kvs", [])]

    def put(self, key: str, value: bytes | str, lease: int = 0) -> int:
        response = self.call("/kv/put", put_op(key, value, lease)["request_put"])
        return int(response["header"]["revision"])

    def delete(self, key: str) -> bool:
        response = self.call("/kv/deleterange", {"key": _encode(key)})
        return int(response.get("deleted", 0)) > 0

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] = ()) -> tuple[bool, int]:
        """(succeeded, revision). Compares are ANDed, as in etcd."""
        response = self.call("/kv/txn", {"compare": compare, "success": success, "failure": list(failure)})
        return bool(response.get("succeeded", False)), int(response["header"]["revision"])

    # -- leases --------------------------------------------------------------------------------
    def lease_grant(self, ttl: int) -> int:
        return int(self.call("/lease/grant", {"TTL": ttl, "ID": 0})["ID"])

    def lease_keepalive(self, lease_id: int, timeout: Optional[float] = None) -> int:
        """The lease's remaining TTL in seconds after the refresh; <= 0 when it is gone."""
        response = self.call("/lease/keepalive", {"ID": lease_id}, timeout)
        result = response.get("result", response)
        return int(result.get("TTL", 0))

    def lease_revoke(self, lease_id: int) -> None:
        self.call("/kv/lease/revoke", {"ID": lease_id})


def _key_value(kv: dict) -> KeyValue:
    return KeyValue(
        key=_decode(kv["key"]).decode(),
        value=_decode(kv.get("value", "")),
        create_revision=int(kv.get("create_revision", 0)),
        mod_revision=int(kv.get("mod_revision", 0)),
        lease=int(kv.get("lease", 0)),
    )
