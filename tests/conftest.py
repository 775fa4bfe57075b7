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
