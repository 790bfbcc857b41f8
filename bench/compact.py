"""Benchmark: compaction of a batch of changes into a large gold table.

    python -m bench.compact [--rows 1000000] [--changes 10000] [--spread uniform|recent]

Builds a silver change log of ``rows`` inserts into one table (id BIGINT primary key and four
value columns) plus its CREATE TABLE, compacts it into gold (the initial load), then appends
``changes`` changes in a new bronze batch (70% updates, 15% deletes, 15% inserts of new keys) and
times their compaction. ``--spread recent`` puts the updates and deletes on the newest 5% of
keys (at least twice as many keys as they change), as OLTP changes usually are; ``uniform``
spreads them over every key, so every gold file holds one. Prints the times and what the merge
touched (files and rows rewritten), from the gold table's Delta history.

Silver is written with delta-rs directly (the benchmark's input, not a stage).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable, write_deltalake
from ticdc_lake import mysql as m
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.silver import CHANGES_SCHEMA, COLUMN_TYPE, DDL_SCHEMA
from ticdc_lake.spark import build_session
from ticdc_lake.stages.compact import compact
from ticdc_lake.stages.watermark import watermark

TOPIC = "bench"
CHUNK = 1_000_000
RESOLVED = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("ts", pa.int64()),
     ("offset", pa.int64()), ("index", pa.int32()), ("bronze_batch", pa.int64())]
)  # fmt: skip
CREATE = (
    "CREATE TABLE `b`.`t` (`id` bigint NOT NULL, `qty` int, `price` decimal(12,2), "
    "`note` varchar(40), `at` datetime(6), PRIMARY KEY (`id`))"
)
COLUMNS = [  # name, type code, flags
    ("id", m.TYPE_LONGLONG, m.FLAG_BINARY | m.FLAG_HANDLE_KEY | m.FLAG_PRIMARY_KEY),
    ("qty", m.TYPE_LONG, m.FLAG_BINARY | m.FLAG_NULLABLE),
    ("price", m.TYPE_NEWDECIMAL, m.FLAG_BINARY | m.FLAG_NULLABLE),
    ("note", m.TYPE_VARCHAR, m.FLAG_NULLABLE),
    ("at", m.TYPE_DATETIME, m.FLAG_BINARY | m.FLAG_NULLABLE),
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


def run(rows: int, count: int, spread: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    directory = Path(tempfile.mkdtemp(prefix="bench-compact-"))
    (directory / "pipeline.yaml").write_text(
        yaml.safe_dump(
            {"lake": "lake", "topics": {TOPIC: {"protocol": "open-protocol", "partitions": 1}}}
        )
    )
    config = load_config(directory / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    spark = build_session("bench-compact")

    ddl = pa.Table.from_pylist(
        [{"event_id": "create", "commit_ts": 1, "schema": "b", "table": "t", "query": CREATE,
          "ddl_type": m.ACTION_CREATE_TABLE, "topic": TOPIC, "partition": 0, "offset": 0,
          "index": 0, "bronze_batch": 0}],
        schema=DDL_SCHEMA,
    )  # fmt: skip
    write_deltalake(str(layout.ddl), ddl, mode="append", partition_by=["bronze_batch"])
    started = time.perf_counter()
    for low in range(0, rows, CHUNK):  # files of at most a million changes, as Decode writes
        ids = np.arange(low + 1, min(rows, low + CHUNK) + 1)
        inserts = changes(ids, np.array(["insert"] * len(ids)), ids + 9, low + 1, 0, rng)
        write_deltalake(str(layout.changes), inserts, mode="append", partition_by=["bronze_batch"])
    land(layout, pa.table({n: [] for n in CHANGES_SCHEMA.names}).cast(CHANGES_SCHEMA), 0,
         rows + 10, rows + 1)  # fmt: skip
    built = time.perf_counter() - started

    watermark(spark, config)
    started = time.perf_counter()
    compact(spark, config)
    initial = time.perf_counter() - started

    kinds = rng.choice(["update", "delete", "insert"], size=count, p=[0.7, 0.15, 0.15])
    existing = (kinds != "insert").sum()
    low = 1 if spread == "uniform" else max(1, rows - max(rows // 20, 2 * existing))
    touched = rng.choice(np.arange(low, rows + 1), size=existing, replace=False)
    keys = np.empty(count, dtype=np.int64)
    keys[kinds != "insert"] = touched
    keys[kinds == "insert"] = np.arange(rows + 1, rows + 1 + (kinds == "insert").sum())
    change_ts = np.arange(rows + 20, rows + 20 + count)
    batch = changes(keys, kinds, change_ts, rows + 2, 1, rng)
    land(layout, batch, 1, rows + 20 + count, rows + 2 + count)
    watermark(spark, config)
    gold = DeltaTable(str(layout.gold("b", "t")))
    files_before = len(gold.file_uris())
    started = time.perf_counter()
    result = compact(spark, config)
    elapsed = time.perf_counter() - started
    gold = DeltaTable(str(layout.gold("b", "t")))
    merge = next(h for h in gold.history() if h.get("operation") == "MERGE")
    metrics = merge.get("operationMetrics", {})
    return {
        "rows": rows,
        "changes": count,
        "spread": spread,
        "silver_build_s": round(built, 1),
        "initial_load_s": round(initial, 1),
        "compact_s": round(elapsed, 2),
        "gold_rows": result.tables["b.t"].rows,
        "gold_files_before": files_before,
        "files_removed": metrics.get("num_target_files_removed"),
        "files_added": metrics.get("num_target_files_added"),
        "rows_copied": metrics.get("num_target_rows_copied"),
        "rows_updated": metrics.get("num_target_rows_updated"),
        "rows_deleted": metrics.get("num_target_rows_deleted"),
        "rows_inserted": metrics.get("num_target_rows_inserted"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--spread", choices=("uniform", "recent"), default="recent")
    args = parser.parse_args()
    print(json.dumps(run(args.rows, args.changes, args.spread)))


if __name__ == "__main__":
    main()
