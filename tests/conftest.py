"""Shared fixtures: real MariaDB servers (one per session, plus extra ones on demand), and the two
lanes `make test` runs in (`pytest -n 2 --dist loadfile`, see `pytest_xdist_make_scheduler`)."""

from __future__ import annotations

import itertools
import os

import pytest

from sparkcdc.testing.mariadb import MariaDBServer

E2E_LANE = "e2e"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `pytest -n 2 --dist loadfile` in two lanes: one worker runs every e2e test,
    one after another in their usual order, while the other runs the unit and integration modules.
    Two e2e tests side by side (each a server with its Spark JVM, some with four) overload a 2-core
    machine until their waits time out; an integration test beside one does not. Each module stays
    on one worker, so its module-scoped servers start once. Each worker has its own session
    fixtures (its own MariaDB), so the e2e lane's upstream sees what it sees in a serial run.
    (xdist's own `--dist loadgroup` cannot express this on pytest 9.2: it renames node ids.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TwoLanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return E2E_LANE if path.startswith("tests/e2e/") else path

    return TwoLanes(config, log)


def pytest_collection_modifyitems(config, items):
    # On an xdist worker: with --no-loadscope-reorder the scheduler hands out lanes in the order
    # they first appear, so the longest (e2e) starts first.
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.path.parent.name != "e2e")


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory) -> MariaDBServer:
    """One binlog-enabled MariaDB for the whole session."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("mariadb")))
    server.start()
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
