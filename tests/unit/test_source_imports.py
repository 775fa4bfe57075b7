"""What Spark's planner workers load: at each query start they unpickle the data source (the binlog
source, pipeline/source.py; the warm-up's, pipeline/warmup.py) in processes of their own, reused and
kept until a minute idle. The modules must not pull pyarrow, pymysql or sparkcdc's read path into
them (~50 MiB of RSS per process); the binlog source's reader still comes through the import it
makes when Spark asks for it."""

import json
import subprocess
import sys

_CHILD = """
import json, sys
from sparkcdc.pipeline.source import BinlogDataSource, PlannedBinlogSource, SPARK_SCHEMA
from sparkcdc.pipeline.warmup import WarmupDataSource
loaded = sorted(name for name in ("pyarrow", "numpy", "pymysql", "sparkcdc.pipeline.planning",
                                  "sparkcdc.pipeline.stream_reader", "sparkcdc.pipeline.connect_loop") if name in sys.modules)
source = BinlogDataSource({"start_ts": "5", "index_path": "/nonexistent/index.sqlite",
                           "upstream_uri": "mysql://cdc@127.0.0.1:3306/"})
schema = source.schema()
reader = source.streamReader(schema)
from sparkcdc.pipeline.planning import BatchPlan, MarkerPartition, SourceOptions
plan = BatchPlan(SourceOptions(index_path="", upstream_uri="", start_ts=0), (MarkerPartition(0, 1),))
batch_reader = PlannedBinlogSource(plan.to_options()).reader(schema)
print(json.dumps({"loaded": loaded, "schema": schema, "reader": type(reader).__name__,
                  "initial": reader.initialOffset(), "batch_reader": type(batch_reader).__name__,
                  "batch_partitions": len(batch_reader.partitions())}))
"""


def test_the_data_source_module_loads_only_pysparks_api_and_makes_its_reader_on_demand():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["schema"] == "changes binary"
    assert result["reader"] == "BinlogStreamReader"
    assert result["initial"]["ts"] == 5
    assert result["batch_reader"] == "PlannedBinlogReader" and result["batch_partitions"] == 1
