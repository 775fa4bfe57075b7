"""Security of the Open API in-process: TLS, client certificate CNs and basic auth (fake users)."""

import base64
import json
import ssl
import urllib.error
import urllib.request

import pytest

from sparkcdc import errors
from sparkcdc.api.client import APIClient
from sparkcdc.api.server import serve
from sparkcdc.server.metastore import MetaStore
from sparkcdc.server.security import ClientAuthenticator, SecurityConfig, client_ssl_context, security_from_toml
from sparkcdc.testing.tls import TestCA
from test_api_server import FakeController

USERS = {"alice": "s3cret!"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("pki"))
    ca, rogue = TestCA(directory), TestCA(directory, name="rogue-ca")
    return {"ca": ca.ca_path, "server": ca.issue("127.0.0.1", server=True), "client": ca.issue("cdc-client"),
            "other_cn": ca.issue("intruder"), "rogue": rogue.issue("cdc-client-rogue")}


def start(tmp_path, security):
    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), FakeController(), security,
                verify_user=lambda user, password: USERS.get(user) == password)
    api.start()
    return api


def test_toml_and_flag_validation(tmp_path, pki):
    config = security_from_toml({"security": {"ca-path": pki["ca"], "cert-path": pki["server"].cert,
                                              "key-path": pki["server"].key, "cert-allowed-cn": ["a", "b"],
                                              "client-user-required": True, "client-allowed-user": ["alice"]}})
    assert config.validate().cert_allowed_cn == ("a", "b") and config.client_cert_required
    bad = [
        ({"security": {"cert-path": "x"}}, "--cert and --key"),
        ({"security": {"bogus": 1}}, "unknown key(s) bogus"),
        ({"security": {"mtls": "yes"}}, "true or false"),
        ({"security": {"cert-allowed-cn": "a"}}, "list of strings"),
        ({"security": {"client-user-required": True, "client-allowed-user": ["a"]}}, "needs TLS"),
        ({"security": {"cert-path": pki["server"].cert, "key-path": pki["server"].key,
                       "cert-allowed-cn": ["a"]}}, "pass --ca"),
        ({"security": {"cert-path": pki["server"].cert, "key-path": pki["server"].key,
                       "client-user-required": True}}, "client-allowed-user is empty"),
        ({"security": {"cert-path": str(tmp_path / "missing.pem"), "key-path": pki["server"].key}}, "cannot read"),
    ]
    for document, message in bad:
        with pytest.raises(errors.ErrSecurityConfig, match=message.replace("(", r"\(").replace(")", r"\)")):
            security_from_toml(document).validate()


def test_basic_auth_header_parsing():
    authenticator = ClientAuthenticator(
        SecurityConfig(client_user_required=True, client_allowed_user=("alice",)),
        lambda user, password: USERS.get(user) == password)
    authenticator.check("Basic " + base64.b64encode(b"alice:s3cret!").decode())
    for header, message in [(None, "requires a user"), ("Bearer x", "requires a user"),
                            ("Basic !!!", "not valid basic auth"),
                            ("Basic " + base64.b64encode(b"nocolon").decode(), "no ':'"),
                            ("Basic " + base64.b64encode(b"bob:s3cret!").decode(), "not in security.client-allowed"),
                            ("Basic " + base64.b64encode(b"alice:wrong").decode(), "wrong password")]:
        with pytest.raises(errors.ErrClientAuthFailed, match=message) as exc:
            authenticator.check(header)
        assert exc.value.http_status == 401 and "s3cret" not in str(exc.value) and "wrong" not in str(exc.value)[:5]


def test_mutual_tls_allows_only_listed_cn(tmp_path, pki):
    api = start(tmp_path, SecurityConfig(ca_path=pki["ca"], cert_path=pki["server"].cert, key_path=pki["server"].key,
                                         cert_allowed_cn=("cdc-client",)).validate())
    try:
        assert api.url.startswith("https://")
        good = APIClient(api.url, ssl_context=client_ssl_context(pki["ca"], pki["client"].cert, pki["client"].key))
        assert good.list_captures()["total"] == 1
        for cert in (pki["other_cn"], pki["rogue"]):  # wrong CN; right CN shape but another CA
            client = APIClient(api.url, ssl_context=client_ssl_context(pki["ca"], cert.cert, cert.key), timeout=5)
            with pytest.raises(errors.ErrServerUnreachable):
                client.list_captures()
        with pytest.raises(errors.ErrServerUnreachable):  # no client certificate at all
            APIClient(api.url, ssl_context=client_ssl_context(pki["ca"]), timeout=5).list_captures()
        with pytest.raises(errors.ErrServerUnreachable):  # plain HTTP to a TLS port
            APIClient(api.url.replace("https", "http"), timeout=5).list_captures()
        assert good.query_tso()["logic_time"] >= 0  # the server survived the refused clients
    finally:
        api.shutdown()


def test_client_users_guard_writes_not_reads(tmp_path, pki):
    api = start(tmp_path, SecurityConfig(ca_path=pki["ca"], cert_path=pki["server"].cert, key_path=pki["server"].key,
                                         client_user_required=True, client_allowed_user=("alice",)).validate())
    context = client_ssl_context(pki["ca"])
    body = {"changefeed_id": "cf-1", "sink_uri": "blackhole://"}
    try:
        anonymous = APIClient(api.url, ssl_context=context)
        assert anonymous.list_changefeeds()["total"] == 0  # reads are open, as in TiCDC
        assert anonymous.query_tso()["logic_time"] == 5  # so are the POSTs that change nothing
        with pytest.raises(errors.SparkCDCError) as exc:
            anonymous.request("POST", "/api/v2/log", {"log_level": "info"})
        assert exc.value.http_status == 401
        request = urllib.request.Request(api.url + "/api/v2/changefeeds", data=json.dumps(body).encode(),
                                         method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=5)
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Basic")
        assert json.loads(refused.value.read())["error_code"] == "SPARKCDC:ErrClientAuthFailed"
        for user, password in [("alice", "nope"), ("mallory", "s3cret!")]:
            with pytest.raises(errors.SparkCDCError) as exc:
                APIClient(api.url, ssl_context=context, user=user, password=password).create_changefeed(body, "default")
            assert exc.value.http_status == 401
        assert anonymous.list_changefeeds()["total"] == 0
        created = APIClient(api.url, ssl_context=context, user="alice", password="s3cret!").create_changefeed(
            body, "default")
        assert created["id"] == "cf-1" and anonymous.list_changefeeds()["total"] == 1
    finally:
        api.shutdown()


def test_client_context_needs_cert_and_key_together(pki):
    with pytest.raises(errors.ErrSecurityConfig, match="--cert and --key go together"):
        client_ssl_context(pki["ca"], cert_path=pki["client"].cert)
    assert client_ssl_context() is None
    assert isinstance(client_ssl_context(pki["ca"]), ssl.SSLContext)


def test_metrics_and_the_status_page_take_the_apis_tls_and_client_certificates(tmp_path, pki):
    from test_observability_units import FakeObservability

    security = SecurityConfig(ca_path=pki["ca"], cert_path=pki["server"].cert, key_path=pki["server"].key,
                              cert_allowed_cn=("cdc-client",)).validate()
    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), FakeController(), security,
                observability=FakeObservability())
    api.start()
    try:
        good = APIClient(api.url, ssl_context=client_ssl_context(pki["ca"], pki["client"].cert, pki["client"].key))
        assert good.metrics().startswith("# HELP")
        assert good.request("GET", "/dashboard/data") == {"changefeeds": []}
        for context in (client_ssl_context(pki["ca"], pki["other_cn"].cert, pki["other_cn"].key),
                        client_ssl_context(pki["ca"])):  # a CN not allowed; no client certificate
            with pytest.raises(errors.ErrServerUnreachable):
                APIClient(api.url, ssl_context=context, timeout=5).metrics()
        with pytest.raises(errors.ErrServerUnreachable):  # plain HTTP to the TLS port
            APIClient(api.url.replace("https", "http"), timeout=5).metrics()
    finally:
        api.shutdown()
