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


def as_sent(info, name, raw):
    return raw


def row(ts, table, value):
    return RowEvent(ts, "db", table, "insert", None, (("id", value),), as_sent)  # equal rows are equal events


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


def applied_rows(merger, recorder, *partitions):
    for events in partitions:
        merger.add("t", 0, events)
    merger.apply_resolved()
    return [entry[2:] for entry in recorder.log if entry[0] == "row"]


def keyless_merger():
    recorder = Recorder()
    return EventMerger(recorder, lambda s, t: TableInfo("db", t, 1, TABLE.columns, 1, ())), recorder


def test_equal_rows_of_one_transaction_are_all_applied():
    # A table without a key: two equal rows are two rows (an initial snapshot's copy often has them).
    merger, recorder = keyless_merger()
    assert applied_rows(merger, recorder, [row(10, "a", "1"), row(10, "a", "1"), row(10, "a", "2"),
                                           row(20, "a", "1"), ("watermark", 30)]) == \
        [(10, ("1",)), (10, ("1",)), (10, ("2",)), (20, ("1",))]


def test_a_restarted_changefeeds_resent_rows_count_once():
    # Sent up to watermark 20, then part of the next batch; the restart from checkpoint 5 sends all after it again.
    merger, recorder = keyless_merger()
    first = [row(10, "a", "1"), ("watermark", 20), row(30, "a", "x"), row(30, "a", "x")]
    again = [row(10, "a", "1"), ("watermark", 20), row(30, "a", "x"), row(30, "a", "x"), row(30, "a", "y"),
             row(35, "a", "z"), ("watermark", 40)]
    assert applied_rows(merger, recorder, first, again) == \
        [(10, ("1",)), (30, ("x",)), (30, ("x",)), (30, ("y",)), (35, ("z",))]


def test_a_transaction_sent_again_replaces_its_first_run():
    # The restart began at watermark 20 itself: nothing below it comes again, only the run at 30 does.
    merger, recorder = keyless_merger()
    assert applied_rows(merger, recorder, [("watermark", 20), row(30, "a", "x"), row(30, "b", "q")],
                        [row(30, "a", "x"), row(30, "a", "x"), row(30, "b", "q"), ("watermark", 40)]) == \
        [(30, ("x",)), (30, ("x",)), (30, ("q",))]


def test_pieces_of_a_large_transaction_are_kept_and_a_lower_watermark_drops_the_buffer():
    merger, recorder = keyless_merger()
    # A large transaction at 30: its first piece, the watermark 29 that ends that batch, its second piece.
    assert applied_rows(merger, recorder, [("watermark", 20), row(30, "a", "x"), ("watermark", 29),
                                           row(30, "a", "x"), row(30, "a", "y"), ("watermark", 40)]) == \
        [(30, ("x",)), (30, ("x",)), (30, ("y",))]
    merger, recorder = keyless_merger()
    # A changefeed resumed at an earlier checkpoint (overwrite-checkpoint-ts): its watermark falls back.
    assert applied_rows(merger, recorder, [("watermark", 20), row(30, "a", "partial")],
                        [("watermark", 15), row(30, "a", "whole"), ("watermark", 40)]) == [(30, ("whole",))]


def test_a_restart_is_recognised_once_while_its_batch_mixes_tables():
    # Batch (5, 20] then part of (20, 40]; the restart from 5 sends (5, 40] as one batch, table by table.
    merger, recorder = keyless_merger()
    first = [row(10, "a", "1"), row(15, "b", "2"), ("watermark", 20), row(30, "a", "x")]
    again = [row(10, "a", "1"), row(30, "a", "x"), row(30, "a", "y"), row(15, "b", "2"), row(35, "b", "3"),
             ("watermark", 40)]
    assert applied_rows(merger, recorder, first, again) == \
        [(10, ("1",)), (30, ("x",)), (30, ("y",)), (15, ("2",)), (35, ("3",))]  # table a's rows, then b's
