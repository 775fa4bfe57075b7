"""Shared fixtures: real MariaDB servers (one per session, plus extra ones on demand), one Kafka
broker and one schema registry for the session (each test uses its own topics)."""

from __future__ import annotations

import itertools
import os

import pytest

from sparkcdc.testing.kafka import KafkaBroker
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.testing.schema_registry import SchemaRegistry


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory) -> MariaDBServer:
    """One binlog-enabled MariaDB for the whole session."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("mariadb")))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> KafkaBroker:
    """One KRaft broker for the session: a start costs ~10 s of a JVM. A test that stops or
    restarts its broker, or needs SASL, starts one of its own."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> SchemaRegistry:
    """One Confluent-compatible schema registry for the session (subjects follow the topics)."""
    server = SchemaRegistry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()


@pytest.fixture
def mariadb_factory(tmp_path_factory):
    """Start extra servers, e.g. `mariadb_factory(extra_config={"binlog_format": "STATEMENT"})`."""
    started: list[MariaDBServer] = []

    def start(extra_config: dict[str, str] | None = None) -> MariaDBServer:
        server = MariaDBServer(str(tmp_path_factory.mktemp("mariadb-extra")), extra_config=extra_config)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def mariadb_factory_module(tmp_path_factory):
    """`mariadb_factory` for servers a whole test module shares."""
    started: list[MariaDBServer] = []

    def start(extra_config: dict[str, str] | None = None) -> MariaDBServer:
        server = MariaDBServer(str(tmp_path_factory.mktemp("mariadb-extra")), extra_config=extra_config)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


_db_counter = itertools.count()


@pytest.fixture
def fresh_db(mariadb) -> str:
    """A new, empty database on `mariadb`, unique to this test."""
    name = f"t{os.getpid()}_{next(_db_counter)}"
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    conn.close()
    return name


# A failed test that ran sparkcdc servers shows what they logged: CI keeps only pytest's output.
SERVER_LOG_PROBLEMS = 60  # the last WARNING/ERROR lines shown
SERVER_LOG_TAIL = 30  # and the last lines of all


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    tmp_path = item.funcargs.get("tmp_path")
    if tmp_path is None:
        return
    for log_path in sorted(tmp_path.rglob("server.log")):
        lines = log_path.read_text(errors="replace").splitlines()
        problems = [line for line in lines if "] [WARNING] [" in line or "] [ERROR] [" in line]
        shown = problems[-SERVER_LOG_PROBLEMS:] + ["..."] + lines[-SERVER_LOG_TAIL:]
        report.sections.append((f"server log {log_path.relative_to(tmp_path)}",
                                "\n".join(line[:400] for line in shown)))
