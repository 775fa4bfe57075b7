"""Fixtures the Kafka integration tests share: one broker (and one schema registry) per module."""

from __future__ import annotations

import pytest

from sparkcdc.testing.kafka import KafkaBroker
from sparkcdc.testing.schema_registry import SchemaRegistry


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    server = SchemaRegistry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()
