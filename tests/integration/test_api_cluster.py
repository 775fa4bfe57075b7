"""The Open API of two captures that share a real etcd (`--pd`): captures, processors, drain,
owner resign forwarded to the owner (over http, and over https with client certificates checked
on both sides), and unsafe metadata with secrets masked. The captures' changefeed runners are
fakes (no Spark); metadata, election and assignment are the real ones."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from sparkcdc.api.server import serve
from sparkcdc.server.capture import Capture, CaptureOptions
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.server.security import SecurityConfig, client_ssl_context
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.ports import free_port
from sparkcdc.testing.tls import TestCA

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)")]


class FakeRunner:
    def __init__(self):
        self._running = set()

    def start_or_retry_later(self, info):
        self._running.add((info.namespace, info.id))

    def stop(self, namespace, changefeed_id):
        self._running.discard((namespace, changefeed_id))

    def running(self):
        return sorted(self._running)


def call(port, method, path, body=None, context=None):
    """One API call; https with `context` (an ssl.SSLContext)."""
    data = None if body is None else json.dumps(body).encode()
    scheme = "https" if context is not None else "http"
    request = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_cluster(tmp_path, mariadb, security=SecurityConfig()):
    """Two captures on one etcd, each serving the API (with `security`): yields their members."""
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    members = []
    try:
        for name in ("a", "b"):
            port = free_port()
            capture = Capture(CaptureOptions(addr=f"127.0.0.1:{port}", data_dir=str(tmp_path / name),
                                             upstream_uri=mariadb.uri, pd=etcd.endpoint, capture_session_ttl=3))
            capture.cluster.tick = 0.2
            runner = FakeRunner()
            capture.cluster.open(runner)
            api = serve(f"127.0.0.1:{port}", capture.store, capture, security)
            api.start()
            members.append((capture, runner, api, port))
        yield members
    finally:
        for capture, _, api, _ in members:
            api.shutdown()
            capture.cluster.close()
        etcd.stop()


@pytest.fixture
def cluster(tmp_path, mariadb):
    yield from start_cluster(tmp_path, mariadb)


def info(changefeed_id: str) -> ChangefeedInfo:
    return ChangefeedInfo(namespace="default", id=changefeed_id, upstream_id=0,
                          sink_uri="mysql://cdc:top-secret@127.0.0.1:3306/", create_time="2024-01-01T00:00:00",
                          start_ts=1, target_ts=0, state="normal", error=None, config={}, creator_version="t")


def test_cluster_routes(cluster):
    (a, runner_a, _, port_a), (b, runner_b, _, port_b) = cluster
    owner_id = wait_until(lambda: next((c["id"] for c in call(port_a, "GET", "/api/v2/captures")[1]["items"]
                                        if c["is_owner"]), None), 10, "an owner")
    for port in (port_a, port_b):
        captures = call(port, "GET", "/api/v2/captures")[1]
        assert captures["total"] == 2 and {c["id"] for c in captures["items"]} == {a.id, b.id}
        assert sum(c["is_owner"] for c in captures["items"]) == 1
    assert call(port_a, "GET", "/api/v2/status")[1]["is_owner"] == (owner_id == a.id)

    for changefeed_id in ("f1", "f2"):
        a._etcd_store.create_changefeed(info(changefeed_id), ChangefeedStatus(1, 1))
    processors = wait_until(lambda: (lambda items: items if len(items) == 2 else None)(
        call(port_b, "GET", "/api/v2/processors")[1]["items"]), 10, "both changefeeds assigned")
    placed = {p["changefeed_id"]: p["capture_id"] for p in processors}
    assert set(placed) == {"f1", "f2"}
    wait_until(lambda: {cf for _, cf in runner_a.running() + runner_b.running()} == {"f1", "f2"}, 10,
               "both captures to run what the API shows")
    assert {cf for _, cf in (runner_a if a.id == placed["f1"] else runner_b).running()} >= {"f1"}
    assert call(port_b, "GET", "/api/v2/changefeeds/f1")[1]["task_status"] == [
        {"capture_id": placed["f1"], "table_ids": []}]
    status, detail = call(port_a, "GET", f"/api/v2/processors/f1/{placed['f1']}")
    assert status == 200 and detail == {"table_ids": []}  # the fake upstream index has no tables
    other = b.id if placed["f1"] == a.id else a.id
    if placed["f2"] != other:  # both on one capture: the other one runs nothing
        assert call(port_a, "GET", f"/api/v2/processors/f1/{other}")[0] == 404

    metadata = call(port_a, "GET", "/api/v2/unsafe/metadata")[1]
    keys = [row["key"] for row in metadata]
    assert "/tidb/cdc/default/default/changefeed/info/f1" in keys
    assert any(key.startswith("/tidb/cdc/default/__cdc_meta__/capture/") for key in keys)
    assert "top-secret" not in json.dumps(metadata) and "cdc:xxxxx@" in json.dumps(metadata)

    # Drain the capture running f1: it moves to the other one.
    status, drained = call(port_b, "POST", f"/api/v2/captures/{placed['f1']}/drain")
    assert status == 200 and drained["current_table_count"] >= 1
    wait_until(lambda: {p["changefeed_id"]: p["capture_id"] for p in
                        call(port_a, "GET", "/api/v2/processors")[1]["items"]}.get("f1") == other, 15, "f1 moved")
    assert call(port_a, "POST", "/api/v2/captures/no-such-capture/drain")[0] == 404

    # Resign through the capture that is not the owner: the request reaches the owner.
    non_owner_port = port_b if owner_id == a.id else port_a
    assert call(non_owner_port, "POST", "/api/v2/owner/resign") == (200, {})
    wait_until(lambda: next((c["id"] for c in call(port_a, "GET", "/api/v2/captures")[1]["items"]
                             if c["is_owner"]), owner_id) != owner_id, 15, "the other capture to become owner")


def test_resign_is_forwarded_to_the_owner_over_tls(tmp_path, mariadb):
    """A capture calls the owner with its own certificate (docs/api.md): the owner checks it against
    cert-allowed-cn, the calling capture checks the owner's against the CA."""
    ca = TestCA(str(tmp_path / "pki"))
    capture_cert, cli_cert = ca.issue("127.0.0.1", server=True, client=True), ca.issue("cdc-cli")
    security = SecurityConfig(ca_path=ca.ca_path, cert_path=capture_cert.cert, key_path=capture_cert.key,
                              cert_allowed_cn=("cdc-cli", "127.0.0.1"))
    context = client_ssl_context(ca.ca_path, cli_cert.cert, cli_cert.key)
    members = start_cluster(tmp_path, mariadb, security)
    (a, _, _, port_a), (b, _, _, port_b) = next(members)
    try:
        def owner():
            return next((c["id"] for c in call(port_a, "GET", "/api/v2/captures", context=context)[1]["items"]
                         if c["is_owner"]), None)

        owner_id = wait_until(owner, 10, "an owner")
        non_owner_port = port_b if owner_id == a.id else port_a
        assert call(non_owner_port, "POST", "/api/v2/owner/resign", context=context) == (200, {})
        wait_until(lambda: owner() not in (None, owner_id), 15, "the other capture to become owner")
    finally:
        members.close()
