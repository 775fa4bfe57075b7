"""pipeline/without_pandas.py: a process that keeps pandas out still converts with pyarrow, and one
that had imported pandas before keeps it. In child processes: the rule is for the whole process."""

from __future__ import annotations

import subprocess
import sys

_KEPT_OUT = """
import sys
from sparkcdc.pipeline.without_pandas import keep_pandas_out
assert keep_pandas_out() is True
import pyarrow as pa, pyarrow.compute as pc
assert pc.equal(pa.array([1, 2, 3]), 2).to_pylist() == [False, True, False]
assert pa.scalar(5).as_py() == 5 and list(pa.array([4, 5]).to_numpy()) == [4, 5]
try:
    import pandas
except ModuleNotFoundError as exc:
    assert "without_pandas" in str(exc), exc
else:
    raise SystemExit("pandas was imported")
try:
    pa.table({"x": [1]}).to_pandas()
except ImportError:
    pass
else:
    raise SystemExit("to_pandas worked without pandas")
assert "pandas" not in sys.modules
print("ok")
"""

_ALREADY_IMPORTED = """
import pandas
from sparkcdc.pipeline.without_pandas import keep_pandas_out
assert keep_pandas_out() is False
import pyarrow as pa
assert pa.table({"x": [1, 2]}).to_pandas()["x"].sum() == 3
print("ok")
"""


def _run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-500:]
    return done.stdout.strip()


def test_pyarrow_converts_without_pandas_once_it_is_kept_out():
    assert _run(_KEPT_OUT) == "ok"


def test_a_process_that_imported_pandas_keeps_it():
    assert _run(_ALREADY_IMPORTED) == "ok"
