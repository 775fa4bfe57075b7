import json
import urllib.error
import urllib.request

import pytest

from sparkcdc.errors import ErrAPIInvalidParam, ErrStartTsInvalid
from sparkcdc.model import tso
from sparkcdc.api.server import serve
from sparkcdc.server.metastore import MetaStore
from sparkcdc.sink.registry import classify_sink_uri

NOW = tso.compose(1_700_000_000_000, 5)
POSITIONS = {"0-1-876": 3000, "mysql-bin.000002:4567": 1500}  # what the fake index resolves


class FakeController:
    def __init__(self):
        self.started, self.stopped, self.validated = [], [], []
        self.verified_sinks = []
        self.fail_start = False
        self.resolved_ts = NOW
        self.last_synced = NOW
        self.meta_rows = []

    def validate(self, sink_uri, config):
        classify_sink_uri(sink_uri)
        self.validated.append((sink_uri, config))

    def resolve_start_ts(self, start_ts):
        if isinstance(start_ts, str) and not start_ts.isdigit():  # a GTID or FILE:POS the index knows
            if start_ts not in POSITIONS:
                raise ErrStartTsInvalid(f"{start_ts} is not in the index")
            return POSITIONS[start_ts]
        return int(start_ts) or NOW

    def current_tso(self):
        return NOW

    def start(self, info):
        if self.fail_start:
            raise RuntimeError(f"boom writing to {info.sink_uri}")
        self.started.append(info.id)

    def stop(self, namespace, id):
        self.stopped.append(id)

    def capture_info(self):
        return {"id": "cap-1", "address": "127.0.0.1:8300", "cluster_id": "default"}

    def verify_tables(self, config, start_ts, sink_uri=""):
        self.verified_sinks.append(sink_uri)  # the capture checks it first (parse_sink_spec)
        return [], []

    def drain_capture(self, capture_id):
        raise ErrAPIInvalidParam("drain needs a cluster (`sparkcdc server --pd`)")  # as a single node's

    def resign_owner(self):
        return False

    def list_captures(self):
        return [{"id": "cap-1", "is_owner": True, "address": "127.0.0.1:8300", "cluster_id": "default"}]

    def processors(self):
        return [("default", changefeed_id, "cap-1") for changefeed_id in self.running()]

    def running(self):
        started = [cf for cf in self.started]
        for cf in self.stopped:
            if cf in started:
                started.remove(cf)
        return sorted(set(started))

    def processor_table_ids(self, info):
        return [11, 12]

    def puller_resolved_ts(self):
        return self.resolved_ts

    def upstream_tso(self):
        return self.resolved_ts

    def puller_state(self):
        return {"state": "running", "upstream": "mysql://root@127.0.0.1:3306/", "capture_id": "cap-1",
                "resolved_ts": self.resolved_ts, "since": "2024-01-01T00:00:00+00:00", "error": None}

    def last_synced_ts(self, checkpoint_ts):
        return min(self.last_synced, checkpoint_ts)

    def metadata(self):
        return self.meta_rows


@pytest.fixture
def api(tmp_path):
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    controller = FakeController()
    server = serve("127.0.0.1:0", store, controller)
    server.start()
    server.store, server.controller = store, controller
    yield server
    server.shutdown()


def call(server, method, path, body=None, raw=None):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


SINK = "mysql://root:secret@127.0.0.1:3306/"


def create(server, changefeed_id="cf-1", **extra):
    return call(server, "POST", "/api/v2/changefeeds", {"changefeed_id": changefeed_id, "sink_uri": SINK, **extra})


def test_health_status_captures_tso(api):
    assert call(api, "GET", "/api/v2/health") == (200, {})
    status, body = call(api, "GET", "/api/v2/status")
    assert status == 200 and body["id"] == "cap-1" and body["is_owner"] and body["liveness"] == 0
    assert call(api, "GET", "/api/v2/captures")[1] == {
        "total": 1, "items": [{"id": "cap-1", "is_owner": True, "address": "127.0.0.1:8300", "cluster_id": "default"}]}
    assert call(api, "POST", "/api/v2/tso")[1] == {"timestamp": 1_700_000_000_000, "logic_time": 5}


def test_tso_is_the_upstreams_not_the_clock(api):
    # The controller's upstream TSO (Puller.tso: the resolved-ts once the binlog's end at the call
    # is indexed), not the clock: binlog event times are whole seconds.
    api.controller.resolved_ts = NOW - (400 << 18)
    assert call(api, "POST", "/api/v2/tso")[1] == {"timestamp": 1_700_000_000_000 - 400, "logic_time": 5}


def test_create_query_list_and_masking(api):
    status, info = create(api, replica_config={"sink": {"date_separator": "none"}})
    assert status == 200, info
    assert info["sink_uri"] == "mysql://root:xxxxx@127.0.0.1:3306/"
    assert info["start_ts"] == NOW and info["checkpoint_ts"] == NOW and info["state"] == "normal"
    assert info["config"]["sink"]["date_separator"] == "none"
    assert api.controller.started == ["cf-1"]
    status, got = call(api, "GET", "/api/v2/changefeeds/cf-1")
    assert got["sink_uri"].count("xxxxx") == 1 and "secret" not in json.dumps(got)
    assert got["checkpoint_time"] == tso.format_time(NOW)
    status, listing = call(api, "GET", "/api/v2/changefeeds")
    assert listing["total"] == 1 and listing["items"][0]["checkpoint_tso"] == NOW
    assert call(api, "GET", "/api/v2/changefeeds/cf-1/status")[1] == {
        "state": "normal", "resolved_ts": NOW, "checkpoint_ts": NOW, "last_error": None, "last_warning": None}


def test_create_generates_uuid_when_id_omitted(api):
    status, info = call(api, "POST", "/api/v2/changefeeds", {"sink_uri": "blackhole://"})
    assert status == 200 and len(info["id"]) == 36


@pytest.mark.parametrize("body, code", [
    ({"changefeed_id": "bad_id", "sink_uri": SINK}, "SPARKCDC:ErrChangefeedInvalidID"),
    ({"changefeed_id": "a--b", "sink_uri": SINK}, "SPARKCDC:ErrChangefeedInvalidID"),
    ({"changefeed_id": "ok", "sink_uri": "ftp://x"}, "SPARKCDC:ErrSinkURIInvalid"),
    ({"changefeed_id": "ok"}, "SPARKCDC:ErrSinkURIInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": NOW + 1}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": 100, "target_ts": 100}, "SPARKCDC:ErrTargetTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "replica_config": {"sink": {"bogus": 1}}},
     "SPARKCDC:ErrInvalidReplicaConfig"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "unknown_field": 1}, "SPARKCDC:ErrAPIInvalidParam"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "pd_addrs": ["http://pd:2379"]}, "SPARKCDC:ErrAPIInvalidParam"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "target_ts": -1}, "SPARKCDC:ErrAPIInvalidParam"),
    # found by schemathesis: past signed 64 bits, SQLite cannot hold it (was a 500)
    ({"changefeed_id": "ok", "sink_uri": SINK, "target_ts": 1 << 63}, "SPARKCDC:ErrAPIInvalidParam"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": 1 << 70}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": str(1 << 70)}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": str(NOW + 1)}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": "0-1-999"}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": [1]}, "SPARKCDC:ErrStartTsInvalid"),
    ({"changefeed_id": "ok", "sink_uri": SINK, "start_ts": " "}, "SPARKCDC:ErrStartTsInvalid"),
])
def test_create_errors(api, body, code):
    status, error = call(api, "POST", "/api/v2/changefeeds", body)
    assert status == 400 and error["error_code"] == code and error["error_msg"]
    assert call(api, "GET", "/api/v2/changefeeds")[1]["total"] == 0


@pytest.mark.parametrize("start, resolved", [(0, NOW), (1000, 1000), ("1000", 1000), ("0-1-876", 3000),
                                             (" mysql-bin.000002:4567 ", 1500)])
def test_create_starts_at_a_tso_gtid_or_binlog_position(api, start, resolved):
    status, info = create(api, start_ts=start)
    assert status == 200 and info["start_ts"] == info["checkpoint_ts"] == resolved, info


def test_a_start_in_the_future_is_refused(api):
    """TiCDC: "invalid start-ts %v, larger than current tso %v" (issue 20 item 4); the newest
    indexed transaction counts as now when the upstream's clock runs ahead of ours."""
    hour_ahead = tso.compose(tso.physical_ms(NOW) + 3_600_000)
    status, error = create(api, start_ts=hour_ahead)
    assert status == 400 and error["error_code"] == "SPARKCDC:ErrStartTsInvalid"
    assert f"invalid start_ts {hour_ahead}" in error["error_msg"] and f"current TSO {NOW}" in error["error_msg"]
    api.controller.resolved_ts = hour_ahead
    assert create(api, start_ts=hour_ahead)[0] == 200


def test_resume_overwrites_the_checkpoint_with_a_tso_gtid_or_position(api):
    create(api)
    call(api, "POST", "/api/v2/changefeeds/cf-1/pause")
    for overwrite, checkpoint in [("0-1-876", 3000), ("mysql-bin.000002:4567", 1500), (2000, 2000)]:
        assert call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {"overwrite_checkpoint_ts": overwrite})[0] == 200
        assert call(api, "GET", "/api/v2/changefeeds/cf-1")[1]["checkpoint_ts"] == checkpoint
        call(api, "POST", "/api/v2/changefeeds/cf-1/pause")
    status, error = call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {"overwrite_checkpoint_ts": NOW + 1})
    assert status == 400 and "invalid overwrite_checkpoint_ts" in error["error_msg"], error
    assert call(api, "GET", "/api/v2/changefeeds/cf-1")[1]["state"] == "stopped"


def test_create_duplicate_and_bad_json_keep_server_running(api):
    create(api)
    status, error = create(api)
    assert status == 400 and error["error_code"] == "SPARKCDC:ErrChangefeedAlreadyExists"
    status, error = call(api, "POST", "/api/v2/changefeeds", raw=b"{not json")
    assert status == 400 and "not valid JSON" in error["error_msg"]
    status, error = call(api, "POST", "/api/v2/changefeeds", raw=b"[1]")
    assert status == 400 and "JSON object" in error["error_msg"]
    assert call(api, "GET", "/api/v2/health")[0] == 200


def test_create_rolls_back_when_start_fails(api):
    api.controller.fail_start = True
    status, error = create(api)
    assert status == 500 and error["error_code"] == "SPARKCDC:ErrInternal" and "boom" in error["error_msg"]
    assert call(api, "GET", "/api/v2/changefeeds")[1]["total"] == 0


def test_unknown_route_and_method(api):
    status, error = call(api, "GET", "/api/v2/nothing")
    assert status == 404 and error["error_code"] == "SPARKCDC:ErrAPINotFound"
    status, error = call(api, "DELETE", "/api/v2/changefeeds")
    assert status == 405 and error["error_code"] == "SPARKCDC:ErrAPIMethodNotAllowed"
    status, error = call(api, "GET", "/api/v2/changefeeds/missing")
    assert status == 404 and error["error_code"] == "SPARKCDC:ErrChangefeedNotExists"


def raw_exchange(server, request: bytes) -> tuple[int, dict, dict]:
    """Send bytes as they are (http.client would refuse to); (status, headers, JSON body) of the answer."""
    import http.client
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock, method=request.split(b" ", 1)[0].decode(errors="replace"))
        response.begin()
        body = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(body) if body else None


@pytest.mark.parametrize("method, path, allow", [
    ("PATCH", "/api/v2/changefeeds", "POST, GET"),
    ("OPTIONS", "/api/v2/changefeeds", "POST, GET"),
    ("PATCH", "/api/v2/changefeeds/cf-1", "GET, PUT, DELETE"),
    ("TRACE", "/api/v2/health", "GET"),
    ("BREW", "/api/v2/changefeeds/cf-1/pause", "POST"),
])
def test_any_method_is_answered_in_json(api, method, path, allow):
    """http.server answered methods it has no do_X for with an HTML 501 (issue 20)."""
    request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    status, headers, error = raw_exchange(api, request.encode())
    assert (status, headers["allow"], error["error_code"]) == (405, allow, "SPARKCDC:ErrAPIMethodNotAllowed")
    assert headers["content-type"].startswith("application/json") and method in error["error_msg"]
    status, headers, error = raw_exchange(api, f"{method} /api/v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 404 and error["error_code"] == "SPARKCDC:ErrAPINotFound"


def test_head_gets_headers_only(api):
    status, headers, body = raw_exchange(api, b"HEAD /api/v2/health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405 and headers["allow"] == "GET" and body is None


@pytest.mark.parametrize("request_bytes, status, words", [
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "shorten the URL"),
    (b"GARBAGE\r\n\r\n", 400, "Bad request syntax"),
    (b"GET /api/v2/health HTTP/1.1 extra\r\n\r\n", 400, "Bad request"),
    (b"GET /api/v2/health HTTP/1.1\r\n" + b"X-A: b\r\n" * 120 + b"\r\n", 431, "at most 100 header lines"),
    (b"GET /api/v2/health HTTP/2.0\r\n\r\n", 505, "HTTP/1.1"),
])
def test_malformed_requests_get_json_errors(api, request_bytes, status, words):
    """http.server's own refusals were HTML pages (issue 20); the server keeps serving after them."""
    got, headers, error = raw_exchange(api, request_bytes)
    assert got == status and headers["content-type"].startswith("application/json")
    assert error["error_code"] == "SPARKCDC:ErrAPIInvalidParam" and words in error["error_msg"], error
    assert call(api, "GET", "/api/v2/health") == (200, {})


def test_deeply_nested_body_is_bad_input(api):
    """100,000 nested `[` were a 500 `maximum recursion depth exceeded` (issue 20)."""
    for body in (b"[" * 100_000, b'{"changefeed_id": "a", "sink_uri": "blackhole://", "replica_config": '
                 + b'{"a": ' * 40 + b"1" + b"}" * 41):
        status, error = call(api, "POST", "/api/v2/changefeeds", raw=body)
        assert status == 400 and error["error_code"] == "SPARKCDC:ErrAPIInvalidParam", error
        assert "32 levels deep" in error["error_msg"]
    assert create(api)[0] == 200  # ordinary nesting still goes through


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/api/v2/changefeeds?state=sleeping", None),
    ("POST", "/api/v2/tso", {"cert_allowed_cn": {}}),  # found by schemathesis: a non-list was taken
    ("POST", "/api/v2/tso", {"pd_addrs": ["http://pd:2379"]}),
    ("POST", "/api/v2/verify_table", {"ca_path": []}),
    ("POST", "/api/v2/verify_table", {"sink_uri": {}}),
])
def test_wrong_parameters_are_refused(api, method, path, body):
    status, error = call(api, method, path, body)
    assert status == 400 and error["error_code"] == "SPARKCDC:ErrAPIInvalidParam", error


def test_list_state_filters_match_the_document():
    from sparkcdc.api.openapi import PATHS
    from sparkcdc.api.server import LIST_STATE_FILTERS

    state = next(p for p in PATHS["/api/v2/changefeeds"]["get"]["parameters"] if p["name"] == "state")
    assert set(state["schema"]["enum"]) == LIST_STATE_FILTERS


def test_pause_update_resume_remove(api):
    create(api, start_ts=1000)
    status, error = call(api, "PUT", "/api/v2/changefeeds/cf-1", {"target_ts": 5000})
    assert status == 400 and error["error_code"] == "SPARKCDC:ErrChangefeedUpdateRefused"
    assert call(api, "POST", "/api/v2/changefeeds/cf-1/pause") == (200, {})
    assert api.controller.stopped == ["cf-1"]
    info = call(api, "GET", "/api/v2/changefeeds/cf-1")[1]
    assert info["state"] == "stopped" and info["admin_job_type"] == 1
    status, info = call(api, "PUT", "/api/v2/changefeeds/cf-1",
                        {"target_ts": 5000, "sink_uri": "kafka://b:9092/t?sasl-password=pw",
                         "replica_config": {"sink": {"protocol": "canal-json"}}})
    assert status == 200, info
    assert info["target_ts"] == 5000 and info["sink_uri"].endswith("sasl-password=xxxxx")
    assert info["config"]["sink"]["protocol"] == "canal-json"
    assert api.store.get_changefeed("default", "cf-1").sink_uri.endswith("sasl-password=pw")
    status, error = call(api, "PUT", "/api/v2/changefeeds/cf-1", {"target_ts": 10})
    assert error["error_code"] == "SPARKCDC:ErrTargetTsInvalid"
    status, error = call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {"overwrite_checkpoint_ts": 6000})
    assert error["error_code"] == "SPARKCDC:ErrStartTsInvalid"
    assert call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {"overwrite_checkpoint_ts": 2000}) == (200, {})
    info = call(api, "GET", "/api/v2/changefeeds/cf-1")[1]
    assert info["state"] == "normal" and info["checkpoint_ts"] == 2000
    assert api.controller.started == ["cf-1", "cf-1"]
    status, error = call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {"overwrite_checkpoint_ts": 1500})
    assert status == 400 and error["error_code"] == "SPARKCDC:ErrChangefeedUpdateRefused"
    assert call(api, "DELETE", "/api/v2/changefeeds/cf-1") == (200, {})
    assert api.controller.stopped == ["cf-1", "cf-1"]
    assert call(api, "GET", "/api/v2/changefeeds/cf-1")[0] == 404
    assert call(api, "DELETE", "/api/v2/changefeeds/cf-1")[0] == 404


def test_failed_state_is_visible_and_resume_clears_error(api):
    from dataclasses import replace
    create(api)
    error = {"addr": "127.0.0.1:8300", "code": "SPARKCDC:ErrStorageIO", "message": "disk full", "time": "t"}
    api.store.update_changefeed(replace(api.store.get_changefeed("default", "cf-1"), state="failed", error=error))
    assert call(api, "GET", "/api/v2/changefeeds/cf-1")[1]["error"] == error
    assert call(api, "GET", "/api/v2/changefeeds/cf-1/status")[1]["last_error"] == error
    assert call(api, "GET", "/api/v2/changefeeds?state=failed")[1]["total"] == 1
    assert call(api, "GET", "/api/v2/changefeeds?state=normal")[1]["total"] == 0
    call(api, "POST", "/api/v2/changefeeds/cf-1/resume", {})
    info = call(api, "GET", "/api/v2/changefeeds/cf-1")[1]
    assert info["state"] == "normal" and info["error"] is None


@pytest.mark.parametrize("sink_uri, secret", [
    ("s3://b/p?endpoint=http://127.0.0.1:9000&access-key=AK&secret-access-key=S3SECRETKEY&protocol=csv",
     "S3SECRETKEY"),
    ("azblob://c/p?account-name=dev&account-key=AZUREKEY99==&protocol=canal-json", "AZUREKEY99=="),
    ("kafka://127.0.0.1:9092/t?protocol=canal-json&sasl-user=u&sasl-password=KAFKAPW77&sasl-mechanism=PLAIN",
     "KAFKAPW77"),
])
def test_changefeed_answers_mask_secret_parameters_and_errors(api, sink_uri, secret):
    """Sink URIs' secret parameters, the redo storage's and a failed changefeed's error message
    never show in an answer (issue 20 item 5)."""
    from dataclasses import replace

    status, info = create(api, sink_uri=sink_uri,
                          replica_config={"consistent": {"storage": "s3://b/redo?secret-access-key=REDOKEY55"}})
    assert status == 200, info
    error = {"addr": "a", "code": "SPARKCDC:ErrStorageIO", "time": "t", "message": f"cannot write {sink_uri}"}
    api.store.update_changefeed(replace(api.store.get_changefeed("default", "cf-1"), state="failed", error=error))
    answers = [info, call(api, "GET", "/api/v2/changefeeds/cf-1")[1], call(api, "GET", "/api/v2/changefeeds")[1],
               call(api, "GET", "/api/v2/changefeeds/cf-1/meta_info")[1],
               call(api, "GET", "/api/v2/changefeeds/cf-1/status")[1]]
    text = json.dumps(answers)
    assert secret not in text and "REDOKEY55" not in text and "xxxxx" in text
    assert "cannot write" in answers[-1]["last_error"]["message"]


def test_list_filters_state_and_namespace(api):
    from dataclasses import replace
    create(api, "a")
    create(api, "b", namespace="ns2")
    api.store.update_changefeed(replace(api.store.get_changefeed("default", "a"), state="finished"))
    assert [i["id"] for i in call(api, "GET", "/api/v2/changefeeds")[1]["items"]] == ["b"]
    assert len(call(api, "GET", "/api/v2/changefeeds?state=all")[1]["items"]) == 2
    assert [i["id"] for i in call(api, "GET", "/api/v2/changefeeds?state=all&namespace=ns2")[1]["items"]] == ["b"]
    assert call(api, "GET", "/api/v2/changefeeds/b")[0] == 404
    assert call(api, "GET", "/api/v2/changefeeds/b?namespace=ns2")[1]["namespace"] == "ns2"


def test_openapi_document_is_served_and_matches_docs(api):
    from pathlib import Path

    from sparkcdc.api.openapi import openapi_json

    status, document = call(api, "GET", "/api/v2/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.")
    docs = Path(__file__).parents[2] / "docs" / "openapi.json"
    assert docs.read_text() == openapi_json(), "docs/openapi.json is stale: regenerate it (see docs/api.md)"
    # Every route the server dispatches is documented, with the same method.
    documented = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    for method, pattern, _ in api.api._routes:
        path = pattern.pattern.removesuffix("/?$").replace("(?P<changefeed_id>[^/]+)", "{changefeed_id}") \
            .replace("(?P<capture_id>[^/]+)", "{capture_id}")
        assert (method, path) in documented, (method, path)


def test_meta_info_processors_and_log_level(api):
    import logging

    create(api)
    info = call(api, "GET", "/api/v2/changefeeds/cf-1")[1]
    assert info["task_status"] == [{"capture_id": "cap-1", "table_ids": [11, 12]}]
    assert info["puller"]["state"] == "running" and info["puller"]["capture_id"] == "cap-1"
    del info["puller"]  # the query's own: the puller that feeds the changefeed
    assert call(api, "GET", "/api/v2/changefeeds/cf-1/meta_info")[1] == {**info, "task_status": []}
    assert call(api, "GET", "/api/v2/processors")[1] == {
        "total": 1, "items": [{"namespace": "default", "changefeed_id": "cf-1", "capture_id": "cap-1"}]}
    assert call(api, "GET", "/api/v2/processors/cf-1/cap-1") == (200, {"table_ids": [11, 12]})
    status, error = call(api, "GET", "/api/v2/processors/cf-1/cap-9")
    assert status == 404 and error["error_code"] == "SPARKCDC:ErrProcessorNotExists"
    assert call(api, "GET", "/api/v2/processors/nope/cap-1")[0] == 404

    root = logging.getLogger()
    before = root.level
    try:
        assert call(api, "POST", "/api/v2/log", {"log_level": "debug"}) == (200, {})
        assert root.level == logging.DEBUG
        status, error = call(api, "POST", "/api/v2/log", {"log_level": "loud"})
        assert status == 400 and "debug, info, warn" in error["error_msg"]
        assert call(api, "POST", "/api/v2/log")[0] == 400
    finally:
        root.setLevel(before)


def test_unsafe_metadata_and_config_mask_secrets(api):
    create(api, replica_config={"sink": {"kafka_config": {"sasl_password": "hunter2", "sasl_user": "bob"}}})
    info = call(api, "GET", "/api/v2/changefeeds/cf-1")[1]
    kafka_config = info["config"]["sink"]["kafka_config"]
    assert kafka_config["sasl_password"] == "xxxxx" and kafka_config["sasl_user"] == "bob"
    assert "hunter2" not in json.dumps(info)
    api.controller.meta_rows = [("k1", json.dumps({"sink_uri": SINK, "password": "pw"})), ("k2", "plain")]
    rows = call(api, "GET", "/api/v2/unsafe/metadata")[1]
    assert [row["key"] for row in rows] == ["k1", "k2"] and rows[1]["value"] == "plain"
    assert "secret" not in rows[0]["value"] and '"pw"' not in rows[0]["value"]
    assert json.loads(rows[0]["value"]) == {"sink_uri": "mysql://root:xxxxx@127.0.0.1:3306/", "password": "xxxxx"}


def test_synced_route(api):
    create(api)  # TiCDC's default synced_status: 300 s without writes, checkpoint within 15 s
    api.controller.last_synced = tso.compose(1_700_000_000_000 - 400_000)
    status, body = call(api, "GET", "/api/v2/changefeeds/cf-1/synced")
    assert status == 200 and body["synced"] is True and body["info"] == "Data syncing is finished"
    assert body["sink_checkpoint_ts"] == tso.format_time(NOW)
    assert body["last_synced_ts"] == tso.format_time(api.controller.last_synced)
    assert call(api, "GET", "/api/v2/changefeeds/missing/synced")[0] == 404


@pytest.mark.parametrize("ago_synced_s, checkpoint_lag_s, puller_lead_s, synced, info_start", [
    (400, 5, 0, True, "Data syncing is finished"),
    (100, 5, 0, False, "The data syncing is not finished"),     # written recently
    (400, 60, 60, False, "The data syncing is not finished"),   # the puller is far ahead: still catching up
    (400, 60, 0, False, "The checkpoint is behind now"),        # nothing to catch up: is the upstream alive?
])
def test_synced_status_cases(ago_synced_s, checkpoint_lag_s, puller_lead_s, synced, info_start):
    from sparkcdc.api.server import synced_status

    now_ms = 1_700_000_000_000
    checkpoint = tso.compose(now_ms - checkpoint_lag_s * 1000)
    status = synced_status(now_ms=now_ms, checkpoint_ts=checkpoint,
                           puller_resolved_ts=tso.compose(now_ms - (checkpoint_lag_s - puller_lead_s) * 1000),
                           last_synced_ts=tso.compose(now_ms - ago_synced_s * 1000),
                           synced_check_interval_s=300, checkpoint_interval_s=15)
    assert status["synced"] is synced and status["info"].startswith(info_start)
    assert status["now_ts"] == tso.format_time(tso.compose(now_ms))


def test_error_messages_never_carry_uri_passwords(api):
    from sparkcdc.config.secrets import mask_text

    api.controller.fail_start = True
    status, error = create(api, sink_uri="mysql://root:p@ss-w0rd@127.0.0.1:3306/")
    assert status == 500 and "boom writing to mysql://root:xxxxx@127.0.0.1:3306/" in error["error_msg"]
    assert "ss-w0rd" not in json.dumps(error)
    assert mask_text("'kafka://u:x@b:9092/t' file:///a http://h:80/x") == \
        "'kafka://u:xxxxx@b:9092/t' file:///a http://h:80/x"


def test_verify_table_hands_the_sink_to_the_controller(api):
    # The capture names a bad sink before any table (the CLI verifies the tables before it creates).
    status, _ = call(api, "POST", "/api/v2/verify_table", {"sink_uri": "iceberg:///tmp/x?catalog=nessie"})
    assert status == 200 and api.controller.verified_sinks == ["iceberg:///tmp/x?catalog=nessie"]


def test_the_port_is_held_from_serve_and_listened_on_from_start(tmp_path):
    """serve() binds --addr (nothing else can take it while the capture starts) but refuses
    connections until start(); an address already in use is ErrServerListen."""
    import socket

    from sparkcdc.errors import ErrServerListen

    server = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), FakeController())
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", server.port))
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        server.start()
        status, body = call(server, "GET", "/api/v2/health")
        assert status == 200
        with pytest.raises(ErrServerListen, match=f"cannot listen on --addr 127.0.0.1:{server.port}: "):
            serve(f"127.0.0.1:{server.port}", MetaStore(str(tmp_path / "other.sqlite")), FakeController())
    finally:
        server.shutdown()
