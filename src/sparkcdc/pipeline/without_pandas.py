"""Keeps pandas out of the capture's own processes.

pyarrow imports pandas the first time a process converts a Python or numpy value (`pa.scalar(5)`,
`pa.array([...])`, `Array.to_numpy()`), only to ask whether the value is a pandas object. The
capture never uses pandas, and the import costs each process that makes it ~43 MiB of RSS (~28 of
them private) and up to a second: the server's driver and every read worker did
(docs/benchmarks.md). Once `keep_pandas_out()` has run in a process, `import pandas` fails there
as if pandas were not installed, which pyarrow, PySpark's Arrow paths and deltalake take as "no
pandas".

Only where the processes are the capture's own: the `sparkcdc server` driver with a SparkSession of
its own (Spark Connect's client needs pandas), and read tasks whose executors are local (a shared
cluster's Python workers may run another job's pandas UDF next).
"""

from __future__ import annotations

import importlib.abc
import os
import sys


class _WithoutPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (the sparkcdc capture keeps pandas out of its "
                                      "processes: sparkcdc.pipeline.without_pandas)", name=name)
        return None


def in_spark_worker() -> bool:
    """Whether this process is a Python worker (or daemon) Spark started: PythonWorkerFactory gives
    them the secret they answer it with."""
    return "PYTHON_WORKER_FACTORY_SECRET" in os.environ


def keep_pandas_out() -> bool:
    """From now on `import pandas` fails in this process, unless pandas is already imported (then
    nothing changes); whether pandas is kept out."""
    if "pandas" in sys.modules:
        return False
    if not any(isinstance(finder, _WithoutPandas) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WithoutPandas())
    return True
