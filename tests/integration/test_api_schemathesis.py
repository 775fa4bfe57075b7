"""Schemathesis against a real `sparkcdc server` on a real MariaDB: the served OpenAPI document
drives valid and invalid requests on every route; no answer may be a 5xx, and every answer must
match the document (status code, content type, JSON schema)."""

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sparkcdc.testing.server_process import ServerProcess

pytestmark = pytest.mark.integration

EXAMPLES_PER_MODE = 10  # x 2 modes x ~20 operations x (random + real ids): ~700 requests, about a minute
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def server(mariadb, tmp_path_factory):
    server = ServerProcess(str(tmp_path_factory.mktemp("cdc-fuzz")), mariadb.uri,
                           extra_args=("--spark-master", "local[1]")).start()
    yield server
    server.stop()


def test_served_openapi_document_holds_under_fuzzing(server, tmp_path):
    server.api("POST", "/api/v2/changefeeds", {"changefeed_id": "fuzz-cf",
                                               "sink_uri": f"file://{tmp_path}/out?protocol=canal-json"})
    capture_id = server.api("GET", "/api/v2/status")["id"]
    schema = schemathesis.openapi.from_url(server.url + "/api/v2/openapi.json")
    failures: list[str] = []
    requests = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        path_names = {p.name for p in operation.path_parameters}
        # Random ids reach the "unknown" branches; the real ones reach the handlers' bodies.
        known_ids = {"changefeed_id": "fuzz-cf", "capture_id": capture_id}
        variants = [None] + ([{name: known_ids[name] for name in path_names}] if path_names else [])
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            for path_parameters in variants:
                strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

                @settings(max_examples=EXAMPLES_PER_MODE, deadline=None, database=None, phases=[Phase.generate],
                          suppress_health_check=list(HealthCheck))
                @given(case=strategy)
                def run(case):
                    nonlocal requests
                    requests += 1
                    response = case.call(base_url=server.url, timeout=60)
                    case.validate_response(response, checks=CHECKS)

                try:
                    run()
                except Unsatisfiable:
                    assert mode is schemathesis.GenerationMode.NEGATIVE  # nothing in the request to make invalid
                except Exception as exc:  # collect every operation's failure, then report them all
                    failures.append(f"{operation.label} ({mode.value}): {exc}"[:3000])
    assert requests > 200
    assert not failures, "\n\n".join(failures)
    assert server.api("GET", "/api/v2/health") == {}
