"""Encode benchmark: rows/s per CPU second, Python vs native `encode_arrow`, one process.

    .venv/bin/python bench/encode_bench.py [--rows 200000] [--rounds 3] [--table sysbench|wide]
        [--protocol canal-json|csv] [--batch-rows 4096]

No services: one table's rows are built in memory as the Arrow columns `write_batch` hands the
storage sink (range_reader.CHANGE_SCHEMA's commit_ts/op/before/after, netted and split), in
batches of --batch-rows rows of 100-row transactions. `sysbench` is `id INT PK, k INT,
c CHAR(120), pad CHAR(60)` with sysbench-style values, 60% inserts, 30% updates, 10% deletes;
`wide` is the 36 mixed-type columns of sparkcdc.testing.alltypes (its two non-NULL rows,
inserts). Then, interleaved for --rounds rounds, over the same batches:
  python   the encoder's encode_arrow on the Python path: RowChange objects, then encode_rows
           (what the driver did per row before the native encoders)
  native   the same call with sparkcdc_native's CanalJsonLayout / CsvLayout, from the Arrow buffers
Both produce the same bytes (checked each round). Rows/s are per CPU second of this process.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import pyarrow as pa  # noqa: E402

from sparkcdc.config.replica import SinkConfig  # noqa: E402
from sparkcdc.model.events import BINARY_CHARSET, ColumnInfo, TableInfo  # noqa: E402
from sparkcdc.sink.codec.canal_json import CanalJSONEncoder  # noqa: E402
from sparkcdc.sink.codec.csv import CSVEncoder  # noqa: E402
from sparkcdc.testing.alltypes import COLUMNS, ROWS  # noqa: E402
from sparkcdc.upstream.schema_reader import parse_elements  # noqa: E402

IMAGE = pa.list_(pa.string())
TXN_ROWS = 100


def sysbench_table() -> TableInfo:
    columns = (ColumnInfo("id", "int", nullable=False, is_primary_key=True), ColumnInfo("k", "int", nullable=False),
               ColumnInfo("c", "char", nullable=False, charset="utf8mb4", length=120),
               ColumnInfo("pad", "char", nullable=False, charset="utf8mb4", length=60))
    return TableInfo("sbtest", "sbtest1", 1, columns, 1, handle_key=("id",))


def _sysbench_text(rng: random.Random, groups: int) -> str:
    return "-".join(f"{rng.randrange(10**11):011d}" for _ in range(groups))


def sysbench_rows(rows: int, rng: random.Random) -> list[tuple[str, tuple | None, tuple | None]]:
    out = []
    for n in range(rows):
        image = (str(n + 1), str(rng.randrange(10**6)), _sysbench_text(rng, 10), _sysbench_text(rng, 5))
        kind = rng.random()
        if kind < 0.6:
            out.append(("insert", None, image))
        elif kind < 0.9:
            out.append(("update", image, (image[0], str(int(image[1]) + 1), image[2], image[3])))
        else:
            out.append(("delete", image, None))
    return out


def _column_info(name: str, sql_type: str) -> ColumnInfo:
    """A ColumnInfo for one alltypes column definition (the shapes that table uses)."""
    text = sql_type.lower().replace(" null", "")
    unsigned = text.endswith(" unsigned")
    base = text.removesuffix(" unsigned")
    kind, _, params = base.partition("(")
    numbers = [int(p) for p in params.rstrip(")").split(",")] if params and kind not in ("enum", "set") else []
    info = dict(mysql_type=kind, unsigned=unsigned, nullable=name != "i", is_primary_key=name == "i")
    if kind in ("enum", "set"):
        info["elements"] = parse_elements(sql_type)
    elif kind == "decimal":
        info["precision"], info["scale"] = numbers
    elif kind in ("time", "datetime", "timestamp"):
        info["scale"] = numbers[0] if numbers else 0
    elif numbers:
        info["length"] = numbers[0]
    if kind in ("binary", "varbinary", "blob"):
        info["charset"] = BINARY_CHARSET
    elif kind in ("char", "varchar", "text"):
        info["charset"] = "utf8mb4"
    return ColumnInfo(name, **info)


def wide_table() -> TableInfo:
    return TableInfo("sbtest", "wide", 1, tuple(_column_info(n, t) for n, t in COLUMNS), 1, handle_key=("i",))


def _canonical(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return repr(value) if isinstance(value, float) else str(value)


def wide_rows(rows: int, rng: random.Random) -> list[tuple[str, tuple | None, tuple | None]]:
    out = []
    for n in range(rows):
        row = dict(ROWS[n % 2], i=1_000_000 + n)
        out.append(("insert", None, tuple(_canonical(row[name]) for name, _ in COLUMNS)))
    return out


def batches(rows: list, batch_rows: int) -> list[tuple[pa.Array, ...]]:
    """encode_arrow's columns, 100-row transactions, cut every `batch_rows` rows."""
    out = []
    for start in range(0, len(rows), batch_rows):
        chunk = rows[start:start + batch_rows]
        commit_ts = [((start + i) // TXN_ROWS + 1) << 18 for i in range(len(chunk))]
        out.append((pa.array(commit_ts, pa.int64()), pa.array([op for op, _, _ in chunk]),
                    pa.array([None if b is None else list(b) for _, b, _ in chunk], IMAGE),
                    pa.array([None if a is None else list(a) for _, _, a in chunk], IMAGE)))
    return out


def timed(encoder, table: TableInfo, work: list) -> tuple[float, list]:
    start = time.process_time()
    out = [encoder.encode_arrow(table, *columns) for columns in work]
    return time.process_time() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--table", choices=["sysbench", "wide"], default="sysbench")
    parser.add_argument("--protocol", choices=["canal-json", "csv"], default="canal-json")
    parser.add_argument("--batch-rows", type=int, default=4096)
    args = parser.parse_args()

    rng = random.Random(11)
    table = sysbench_table() if args.table == "sysbench" else wide_table()
    rows = (sysbench_rows if args.table == "sysbench" else wide_rows)(args.rows, rng)
    work = batches(rows, args.batch_rows)
    sink = SinkConfig()
    clock = lambda: 1_700_000_000.0  # noqa: E731  (a fixed ts so both outputs compare equal)
    if args.protocol == "csv":
        encoders = {"python": CSVEncoder(sink, native=False), "native": CSVEncoder(sink)}
    else:
        encoders = {"python": CanalJSONEncoder(sink, clock=clock, native=False),
                    "native": CanalJSONEncoder(sink, clock=clock)}
    if not encoders["native"].is_native:
        encoders.pop("native")
        print(f"sparkcdc_native has no {args.protocol} encoder (run scripts/setup.sh): Python only")
    print(f"load average before: {os.getloadavg()}")
    print(f"{args.protocol}, {args.table}: {len(rows):,} rows, {len(work)} batches of <= {args.batch_rows} rows")
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    size = 0
    for round_number in range(args.rounds):
        outputs = {}
        for name, encoder in encoders.items():
            cpu, outputs[name] = timed(encoder, table, work)
            seconds[name].append(cpu)
            print(f"  round {round_number + 1} {name:7s} {cpu:7.3f} CPU s  {len(rows) / cpu:12,.0f} rows/s")
        if "native" in outputs and outputs["native"] != outputs["python"]:
            raise SystemExit("native and Python encoders wrote different bytes")
        size = sum(len(data) for batch in outputs["python"] for _, data in batch)
    print(f"output: {size / 2**20:,.1f} MiB of {args.protocol}")
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, cpu in medians.items():
        print(f"median {name:7s} {len(rows) / cpu:12,.0f} rows/s per CPU second ({cpu:.3f} CPU s)")
    if "native" in medians:
        print(f"native / python: {medians['python'] / medians['native']:.1f}x")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
