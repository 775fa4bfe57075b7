"""With a local master the runner plans a micro-batch in the driver (runner.LoggedBatchPlan): the
bounds Spark logged for it (the query's first batch starts at the source's start), planned as the
source's own planner plans them, and nothing where the log does not hold them, so that Spark's
read tasks read that batch instead. (That Spark's log holds the bounds it planned a batch for:
tests/integration/test_runner_spark_batches.py.)"""

from __future__ import annotations

import json
import os

from sparkcdc.pipeline.planning import BatchOffset, plan_partitions
from sparkcdc.pipeline.runner import LoggedBatchPlan
from sparkcdc.pipeline.stream_reader import BinlogStreamReader

from test_connect_loop import KEYED, TablesIndex, options
from test_pipeline_planning import txn


def log_offset(checkpoint: str, batch_id: int, offset: dict, lines: list[str] | None = None) -> None:
    """Spark's offsets/<id> file: version, the batch's metadata, then the one source's offset."""
    os.makedirs(os.path.join(checkpoint, "offsets"), exist_ok=True)
    with open(os.path.join(checkpoint, "offsets", str(batch_id)), "w") as f:
        f.write("\n".join(lines if lines is not None else
                          ["v1", json.dumps({"batchWatermarkMs": 0, "conf": {}}), json.dumps(offset)]))


def test_a_logged_batch_is_planned_as_the_source_plans_it(tmp_path):
    index = TablesIndex([txn(10), txn(20), txn(30), txn(40)], resolved=50, tables=[KEYED])
    checkpoint = str(tmp_path)
    log_offset(checkpoint, 6, {"ts": 5})
    log_offset(checkpoint, 7, {"ts": 30})
    plan = LoggedBatchPlan(index, options(), checkpoint)
    assert plan.bounds(7) == (BatchOffset(5), BatchOffset(30))
    reader = BinlogStreamReader(options())
    reader._index = lambda: index
    planned = plan.partitions(7)
    assert planned == reader.partitions({"ts": 5}, {"ts": 30}) == plan_partitions(index, options(), 5, 30, set())
    assert [p.binlog_range.commit_ts for p in planned] == [(10, 20), (30,)]
    log_offset(checkpoint, 8, {"ts": 40, "piece": 2})  # a batch that ends inside a split transaction
    assert plan.bounds(8) == (BatchOffset(30), BatchOffset(40, 2))


def test_no_plan_where_the_log_does_not_hold_the_bounds(tmp_path):
    index = TablesIndex([txn(10), txn(20)], resolved=50, tables=[KEYED])
    checkpoint = str(tmp_path)
    plan = LoggedBatchPlan(index, options(), checkpoint)
    assert plan.partitions(0) is None  # not logged (yet, or purged)
    log_offset(checkpoint, 0, {"ts": 10})
    # The query's first batch starts where the source starts (its initial offset, in no log).
    reader = BinlogStreamReader(options())
    reader._index = lambda: index
    assert plan.bounds(0) == (BatchOffset(5), BatchOffset(10))
    assert plan.partitions(0) == reader.partitions(reader.initialOffset(), {"ts": 10}) != []
    assert plan.partitions(1) is None
    log_offset(checkpoint, 1, {}, lines=["v2", "{}", '{"ts": 20}'])  # another Spark's log format
    assert plan.partitions(1) is None
    log_offset(checkpoint, 1, {}, lines=["v1", "{}", '{"ts": 20}', '{"offset": 3}'])  # two sources
    assert plan.partitions(1) is None
    log_offset(checkpoint, 1, {}, lines=["v1", "{}", "not json"])
    assert plan.partitions(1) is None
    log_offset(checkpoint, 1, {"ts": 20})
    assert plan.partitions(1) == plan_partitions(index, options(), 10, 20, set())
