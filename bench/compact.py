"""Benchmark: compaction of 10k changes into gold tables of 1M and of 10M rows (issue 3).

    python -m bench.compact [--rows 1000000 10000000] [--changes 10000] [--spread recent|uniform]
        [--out bench/results/compact.json]
    python -m bench.compact --large [--rows 1000000] [--changes 400000] [--rounds 2]
        [--out bench/results/compact-large.json]

``--large``: a change set larger than ``gold.changes.COLLECT_LIMIT``, compacted three ways in
turn on the same data (``LARGE_PATHS``): reduced and merged on the driver (what a run of this
size does), reduced by Spark then collected and merged by delta-rs, and reduced by Spark then
merged by delta-spark on the executors (what a run too large for the driver does).

For each size, a lake holds one upstream table (id BIGINT primary key and four value columns)
whose gold table already has ``rows`` rows, then ``changes`` changes arrive in a new bronze
batch (70% updates, 15% deletes, 15% inserts of new keys) and the real compact stage
(``stages.compact.compact``) applies them; that run is timed. ``--spread recent`` puts the
updates and deletes on the newest 5% of keys (at least twice as many keys as they change), as
OLTP changes usually are; ``uniform`` spreads them over every key, so every gold file holds one.

The base state is built without compacting ``rows`` changes (10M would take long on 2 cores):
the stage itself creates the typed, empty gold table and its state from the CREATE TABLE (a
compaction of a batch holding only the DDL and a resolved TS), then the rows are appended to
gold with delta-rs in files of 250k rows of sorted key ranges, the layout the stage's own
initial load writes (``gold.steps.ROWS_PER_FILE``). The timed run starts from that state exactly
as it would after any earlier compaction. Silver is written with delta-rs directly (the
benchmark's input, not a stage).

All sizes run in one SparkSession (``local[2]``, driver heap set explicitly: a 10M run
exhausted the default 1 GB), after a small warm-up run that is not reported. Prints and writes
the times, what the merge touched (files and rows rewritten, from the gold table's Delta
history), and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable, write_deltalake
from ticdc_lake.config import load_config
from ticdc_lake.delta import open_table
from ticdc_lake.delta.read import table_schema
from ticdc_lake.gold import changes as gold_changes
from ticdc_lake.gold.compact import compact
from ticdc_lake.gold.steps import ROWS_PER_FILE
from ticdc_lake.gold.tables import COMMIT_TS
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.silver import mysql
from ticdc_lake.silver.rows import CHANGES_SCHEMA, COLUMN_TYPE, DDL_SCHEMA
from ticdc_lake.silver.watermark import watermark

from bench.machine import machine_report

TOPIC = "bench"
DRIVER_MEMORY = "4g"  # explicit: the default 1 GB ran out at 10M; the base is no longer compacted
RESOLVED = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("ts", pa.int64()),
     ("offset", pa.int64()), ("index", pa.int32()), ("bronze_batch", pa.int64())]
)  # fmt: skip
CREATE = (
    "CREATE TABLE `b`.`t` (`id` bigint NOT NULL, `qty` int, `price` decimal(12,2), "
    "`note` varchar(40), `at` datetime(6), PRIMARY KEY (`id`))"
)
COLUMNS = [  # name, type code, flags
    ("id", mysql.TYPE_LONGLONG, mysql.FLAG_BINARY | mysql.FLAG_HANDLE_KEY | mysql.FLAG_PRIMARY_KEY),
    ("qty", mysql.TYPE_LONG, mysql.FLAG_BINARY | mysql.FLAG_NULLABLE),
    ("price", mysql.TYPE_NEWDECIMAL, mysql.FLAG_BINARY | mysql.FLAG_NULLABLE),
    ("note", mysql.TYPE_VARCHAR, mysql.FLAG_NULLABLE),
    ("at", mysql.TYPE_DATETIME, mysql.FLAG_BINARY | mysql.FLAG_NULLABLE),
]


def images(ids: np.ndarray, rng: np.random.Generator) -> pa.Array:
    """Open Protocol-like images (type codes, no full types) of rows with these ids."""
    n = len(ids)
    draws = rng.integers(0, 10**9, n)
    texts = [
        pa.array(ids.astype(str)),
        pa.array(rng.integers(0, 10**6, n).astype(str)),
        pa.array([f"{v / 100:.2f}" for v in rng.integers(0, 10**9, n)]),
        pa.array(np.char.add("note ", rng.integers(0, 10**6, n).astype(str))),
        pa.array([f"2024-06-{1 + v % 28:02d} 12:00:00.{v % 10**6:06d}" for v in draws]),
    ]  # fmt: skip
    width = len(COLUMNS)
    # Interleave: row i's columns are elements i*width ... i*width + width - 1.
    text = pa.concat_arrays([t.cast(pa.string()) for t in texts]).take(
        pa.array(np.arange(n * width).reshape(width, n).T.ravel())
    )
    names = pa.array([c[0] for c in COLUMNS] * n)
    codes = pa.array([c[1] for c in COLUMNS] * n, pa.int32())
    flags = pa.array([c[2] for c in COLUMNS] * n, pa.int64())
    structs = pa.StructArray.from_arrays(
        [names, codes, flags, pa.nulls(n * width, pa.string()), text,
         pa.nulls(n * width, pa.binary())],
        fields=list(COLUMN_TYPE),
    )  # fmt: skip
    return pa.ListArray.from_arrays(
        pa.array(np.arange(0, n * width + 1, width), pa.int32()), structs
    )


def changes(ids, ops, ts, first_offset, batch, rng) -> pa.Table:
    n = len(ids)
    image = images(ids, rng)
    deleted = ops == "delete"
    nothing = pa.nulls(n, CHANGES_SCHEMA.field("columns").type)
    return pa.table(
        {
            "event_id": pa.array([f"{batch}-{i}" for i in range(n)]),
            "commit_ts": pa.array(ts, pa.int64()),
            "schema": pa.array(["b"] * n),
            "table": pa.array(["t"] * n),
            "op": pa.array(ops),
            "partition_id": pa.nulls(n, pa.int64()),
            "handle_key": pa.array([["id"]] * n, pa.list_(pa.string())),
            "handle_key_only": pa.array([False] * n),
            "columns": _pick(image, nothing, ~deleted),
            # The benchmark's updates keep their key, so the new image serves as the old one.
            "old_columns": _pick(image, nothing, deleted | (ops == "update")),
            "topic": pa.array([TOPIC] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(np.arange(first_offset, first_offset + n), pa.int64()),
            "index": pa.array([0] * n, pa.int32()),
            "bronze_batch": pa.array([batch] * n, pa.int64()),
        },
        schema=CHANGES_SCHEMA,
    )


def _pick(image: pa.Array, nothing: pa.Array, mask: np.ndarray) -> pa.Array:
    return pc.if_else(pa.array(mask), image, nothing)


def land(layout: LakeLayout, table: pa.Table, batch: int, ts: int, offset: int) -> None:
    write_deltalake(str(layout.changes), table, mode="append", partition_by=["bronze_batch"])
    resolved = pa.table(
        {"topic": [TOPIC], "partition": [0], "ts": [ts], "offset": [offset], "index": [0],
         "bronze_batch": [batch]},
        schema=RESOLVED,
    )  # fmt: skip
    write_deltalake(str(layout.resolved), resolved, mode="append", partition_by=["bronze_batch"])


def base_rows(ids: np.ndarray, schema: pa.Schema, rng: np.random.Generator) -> pa.Table:
    """Typed gold rows with these ids, in the gold table's schema."""
    n = len(ids)
    values = {
        "id": pa.array(ids, pa.int64()),
        "qty": pa.array(rng.integers(0, 10**6, n), pa.int64()),
        "price": pa.array(np.char.add(rng.integers(0, 10**7, n).astype(str), ".25")),
        "note": pa.array(np.char.add("note ", rng.integers(0, 10**6, n).astype(str))),
        "at": pa.array(
            np.datetime64("2024-06-01T12:00:00") + rng.integers(0, 10**12, n).astype("m8[us]")
        ),
        COMMIT_TS: pa.array(ids + 9, pa.int64()),
    }
    return pa.table([values[f.name].cast(f.type) for f in schema], schema=schema)


def build_base(spark, config, layout: LakeLayout, rows: int, rng) -> None:
    """A gold table of ``rows`` rows and its state at TS rows + 10 (see the module docstring)."""
    ddl = pa.Table.from_pylist(
        [{"event_id": "create", "commit_ts": 1, "schema": "b", "table": "t", "query": CREATE,
          "ddl_type": mysql.ACTION_CREATE_TABLE, "topic": TOPIC, "partition": 0, "offset": 0,
          "index": 0, "bronze_batch": 0}],
        schema=DDL_SCHEMA,
    )  # fmt: skip
    write_deltalake(str(layout.ddl), ddl, mode="append", partition_by=["bronze_batch"])
    nothing = pa.table({n: [] for n in CHANGES_SCHEMA.names}).cast(CHANGES_SCHEMA)
    land(layout, nothing, 0, rows + 10, 1)
    watermark(spark, config)
    compact(spark, config)  # the typed, empty table and its state
    path = str(layout.gold("b", "t"))
    schema = table_schema(open_table(path)).to_arrow()
    for low in range(0, rows, ROWS_PER_FILE):
        ids = np.arange(low + 1, min(rows, low + ROWS_PER_FILE) + 1)
        write_deltalake(path, base_rows(ids, schema, rng), mode="append")


def run(spark, rows: int, count: int, spread: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    directory = Path(tempfile.mkdtemp(prefix="bench-compact-"))
    (directory / "pipeline.yaml").write_text(
        yaml.safe_dump(
            {"lake": "lake", "topics": {TOPIC: {"protocol": "open-protocol", "partitions": 1}}}
        )
    )
    config = load_config(directory / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    started = time.perf_counter()
    build_base(spark, config, layout, rows, rng)
    built = time.perf_counter() - started

    kinds = rng.choice(["update", "delete", "insert"], size=count, p=[0.7, 0.15, 0.15])
    existing = (kinds != "insert").sum()
    low = 1 if spread == "uniform" else max(1, rows - max(rows // 20, 2 * existing))
    touched = rng.choice(np.arange(low, rows + 1), size=existing, replace=False)
    keys = np.empty(count, dtype=np.int64)
    keys[kinds != "insert"] = touched
    keys[kinds == "insert"] = np.arange(rows + 1, rows + 1 + (kinds == "insert").sum())
    change_ts = np.arange(rows + 20, rows + 20 + count)
    batch = changes(keys, kinds, change_ts, 2, 1, rng)
    land(layout, batch, 1, rows + 20 + count, 2 + count)
    watermark(spark, config)
    gold = DeltaTable(str(layout.gold("b", "t")))
    files_before = len(gold.file_uris())
    started = time.perf_counter()
    result = compact(spark, config)
    elapsed = time.perf_counter() - started
    gold = DeltaTable(str(layout.gold("b", "t")))
    merge = next(h for h in gold.history() if h.get("operation") == "MERGE")
    metrics = _snake_case(merge.get("operationMetrics", {}))
    expected = rows + int((kinds == "insert").sum()) - int((kinds == "delete").sum())
    found = gold.to_pyarrow_dataset().count_rows()
    if found != expected or result.tables["b.t"].rows != expected:
        raise AssertionError(f"gold holds {found} rows, the stage says "
                             f"{result.tables['b.t'].rows}, expected {expected}")  # fmt: skip
    shutil.rmtree(directory)
    return {
        "rows": rows,
        "changes": count,
        "spread": spread,
        "merged_by": merge.get("engineInfo") or "delta-rs",
        "base_build_s": round(built, 1),
        "compact_s": round(elapsed, 2),
        "gold_rows": found,
        "gold_files_before": files_before,
        "files_removed": metrics.get("num_target_files_removed"),
        "files_added": metrics.get("num_target_files_added"),
        "rows_copied": metrics.get("num_target_rows_copied"),
        "rows_updated": metrics.get("num_target_rows_updated"),
        "rows_deleted": metrics.get("num_target_rows_deleted"),
        "rows_inserted": metrics.get("num_target_rows_inserted"),
    }


def _snake_case(metrics: dict) -> dict:
    """delta-spark names its merge metrics numTargetRowsCopied, delta-rs num_target_rows_copied;
    delta-spark's values are strings."""
    named = {}
    for name, value in metrics.items():
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
        named[snake] = int(value) if isinstance(value, str) and value.isdigit() else value
    return named


# --large's paths: (name, DRIVER_REDUCE_LIMIT, COLLECT_LIMIT); None keeps the module's value.
LARGE_PATHS = (
    ("driver", None, None),  # today's path at this size: reduced and merged on the driver
    ("spark-reduce, delta-rs merge", -1, 10**12),  # reduced by Spark, collected, delta-rs
    ("spark-reduce, delta-spark merge", -1, None),  # reduced by Spark, merged on the executors
)


def large(spark, args) -> None:
    """The --large comparison: a change set too large to collect, three ways."""
    load_start = os.getloadavg()
    defaults = gold_changes.DRIVER_REDUCE_LIMIT, gold_changes.COLLECT_LIMIT
    results = []
    for _ in range(args.rounds):
        for path, reduce_limit, collect_limit in LARGE_PATHS:
            gold_changes.DRIVER_REDUCE_LIMIT = defaults[0] if reduce_limit is None else reduce_limit
            gold_changes.COLLECT_LIMIT = defaults[1] if collect_limit is None else collect_limit
            result = {"path": path, **run(spark, args.rows[0], args.changes, args.spread)}
            results.append(result)
            print(json.dumps(result), flush=True)
    gold_changes.DRIVER_REDUCE_LIMIT, gold_changes.COLLECT_LIMIT = defaults
    spark.stop()

    def best(path):
        return min(r["compact_s"] for r in results if r["path"] == path)

    report = {
        "benchmark": "compact-large",
        "spark": {"master": "local[2]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "driver_reduce_limit": defaults[0],
        "collect_limit": defaults[1],
        "results": results,
        "best_s": {path: best(path) for path, *_ in LARGE_PATHS},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for path, *_ in LARGE_PATHS:
        print(f"{args.changes:,} changes into {args.rows[0]:,} rows, {path}: {best(path):.2f} s "
              f"(best of {args.rounds})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+")  # default 1M and 10M; --large: 1M
    parser.add_argument("--changes", type=int)  # default 10k; --large: 400k
    parser.add_argument("--spread", choices=("uniform", "recent"), default="recent")
    parser.add_argument("--large", action="store_true", help="executors against driver")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.rows = args.rows or ([1_000_000] if args.large else [1_000_000, 10_000_000])
    args.changes = args.changes or (400_000 if args.large else 10_000)
    args.out = args.out or Path(f"bench/results/compact{'-large' if args.large else ''}.json")
    load_start = os.getloadavg()
    spark = build_session(
        "bench-compact",
        master="local[2]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    run(spark, 20_000, 1_000, args.spread)  # warm-up: JVM, Python workers; not reported
    if args.large:
        return large(spark, args)
    results = []
    for rows in args.rows:
        results.append(run(spark, rows, args.changes, args.spread))
        print(json.dumps(results[-1]), flush=True)
    spark.stop()
    report = {
        "benchmark": "compact",
        "spark": {"master": "local[2]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "results": results,
        "ratio_largest_to_smallest": round(results[-1]["compact_s"] / results[0]["compact_s"], 2),
        "target_ratio": 2.0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for result in results:
        print(f"{result['rows']:>12,} rows: {result['changes']:,} changes compacted in "
              f"{result['compact_s']:.2f} s; files rewritten {result['files_removed']} of "
              f"{result['gold_files_before']}, rows copied {result['rows_copied']}")  # fmt: skip
    print(f"largest / smallest: {report['ratio_largest_to_smallest']}x (target < 2x); "
          f"load average {report['machine']['load_average_start']} -> "
          f"{report['machine']['load_average_end']}")  # fmt: skip


if __name__ == "__main__":
    main()
