"""The Kafka consumer's topic selection and merge order across topics, and the sink's stall rule."""

from __future__ import annotations

import pytest

from sparkcdc.config.replica import DispatchRule, ReplicaConfig
from sparkcdc.consumer.kafka_consumer import DDLMessage, EventMerger, RowEvent, topics_to_read
from sparkcdc.errors import ErrSinkURIInvalid
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.sink.kafka.dispatcher import is_changefeed_topic
from sparkcdc.sink.kafka.sink import _Stall


def config_with_topics(*expressions):
    replica = ReplicaConfig()
    replica.sink.dispatchers = [DispatchRule(matcher=["db.*"], topic=e) for e in expressions]
    return parse_kafka_sink_uri("kafka://127.0.0.1:9092/cdc-default?protocol=canal-json"
                                "&enable-tidb-extension=true", replica)


def test_topics_follow_the_changefeeds_topic_expressions():
    selected = topics_to_read(config_with_topics("cdc_{schema}_{table}", "all-{schema}"))
    for name in ("cdc-default", "cdc_db_t1", "cdc_my.db_t-2", "all-db"):
        assert selected.fullmatch(name), name
    for name in ("cdc-default2", "other", "cdc_", "all-"):
        assert not selected.fullmatch(name), name


def test_kafka_internal_topics_are_never_read():
    selected = topics_to_read(config_with_topics("{schema}"))
    assert is_changefeed_topic(selected, "shop") and is_changefeed_topic(selected, "cdc-default")
    assert not is_changefeed_topic(selected, "__consumer_offsets")
    assert not is_changefeed_topic(selected, "__transaction_state")


def test_explicit_topics_and_regex_replace_the_derived_ones():
    config = config_with_topics("cdc_{schema}_{table}")
    selected = topics_to_read(config, ["a.b", "c"], r"x-\d+")
    assert [n for n in ("a.b", "c", "x-12", "axb", "cdc-default", "cdc_db_t") if selected.fullmatch(n)] == ["a.b", "c", "x-12"]
    with pytest.raises(ErrSinkURIInvalid, match="not a valid regular expression"):
        topics_to_read(config, (), "x(")


TABLE = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True, nullable=False),), 1, ("id",))


class Recorder:
    def __init__(self):
        self.log = []

    def write_rows(self, table, rows):
        self.log.extend(("row", table.table, r.commit_ts, r.after or r.before) for r in rows)

    def write_ddl(self, ddl):
        self.log.append(("ddl", ddl.table, ddl.commit_ts, ddl.query))

    def flush(self):
        pass


def row(ts, table, value):
    return RowEvent(ts, "db", table, "insert", None, (("id", value),), lambda info, name, raw: raw)


def test_rows_of_several_topics_wait_for_the_lowest_watermark_and_respect_ddl_barriers():
    recorder = Recorder()
    merger = EventMerger(recorder, lambda s, t: TableInfo("db", t, 1, TABLE.columns, 1, ("id",)))
    merger.add_partitions([("db_a", 0), ("db_b", 0), ("db_b", 1)])
    merger.add("db_a", 0, [row(10, "a", "1"), DDLMessage(20, "db", "a", "ALTER TABLE a ADD c INT"),
                           row(30, "a", "2"), ("watermark", 40)])
    merger.add("db_b", 0, [row(15, "b", "1"), row(35, "b", "2"), ("watermark", 40)])
    assert merger.apply_resolved() == 0  # db_b[1] has no watermark yet: nothing may be applied
    merger.add("db_b", 1, [row(25, "b", "3"), ("watermark", 32)])
    assert merger.apply_resolved() == 32
    assert recorder.log == [("row", "a", 10, ("1",)), ("row", "b", 15, ("1",)),
                            ("ddl", "a", 20, "ALTER TABLE a ADD c INT"),
                            ("row", "b", 25, ("3",)), ("row", "a", 30, ("2",))]
    # A partition of a topic found later holds the resolved ts back until its watermark arrives.
    merger.add_partitions([("db_c", 0)])
    merger.add("db_b", 1, [("watermark", 50)])
    assert merger.apply_resolved() == 32
    merger.add("db_c", 0, [row(33, "c", "9"), ("watermark", 50)])
    merger.add("db_a", 0, [("watermark", 50)])
    merger.add("db_b", 0, [("watermark", 50)])
    assert merger.apply_resolved() == 50
    assert recorder.log[5:] == [("row", "c", 33, ("9",)), ("row", "b", 35, ("2",))]


def test_stall_fires_only_when_nothing_is_acknowledged_for_the_limit():
    now = [0.0]
    stall = _Stall(100, 10.0, clock=lambda: now[0])
    now[0] = 9.0
    assert not stall.update(90)  # progress resets the timer
    now[0] = 18.0
    assert not stall.update(90)
    now[0] = 19.5
    assert stall.update(95)  # more waiting is not progress
