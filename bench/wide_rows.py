"""Decode cost per column value as tables widen: 10 to 800 columns (issue 11).

    python -m bench.wide_rows [--widths 10 100 200 400 800] [--out bench/results/wide-rows.json]

Production tables often have hundreds of columns. For Open Protocol, Craft and Canal-JSON (Avro
needs a schema registry) and each width, updates of one table (both images sent; half the
columns INT, half VARCHAR) are encoded and decoded by the decode stage's own path
(``PartitionDecoder``: for Open Protocol the compiled in-place one) on one core. Reported: CPU
nanoseconds per value (best of three) and each width's cost against the narrowest, where a cost
that grew with the width (a per-name search over the row's earlier names) shows as a ratio
growing with it. Target: every ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import yaml
from ticdc_lake.config import load_config
from ticdc_lake.protocols import make_encoder
from ticdc_lake.silver import mysql
from ticdc_lake.silver.decode import PartitionDecoder
from ticdc_lake.silver.events import Column, RowEvent

from bench.machine import machine_report

PROTOCOLS = ("open-protocol", "craft", "canal-json")
VALUES_PER_WIDTH = 800_000  # both images of as many rows as make this many values
TARGET_RATIO = 1.5
REPEATS = 3


def image(key: int, width: int, version: int) -> dict[str, Column]:
    columns = {
        "id": Column(mysql.TYPE_LONGLONG, mysql.FLAG_PRIMARY_KEY | mysql.FLAG_HANDLE_KEY, key)
    }
    for number in range(1, width):
        name = f"column_{number:04d}"
        if number % 2:
            columns[name] = Column(mysql.TYPE_VARCHAR, 0, f"value {version} of {number}")
        else:
            columns[name] = Column(mysql.TYPE_LONG, 0, version * 1000 + number)
    return columns


def bronze_of(protocol: str, width: int, rows: int) -> pa.Table:
    """The encoded updates as bronze's records."""
    events = [
        RowEvent(
            commit_ts=450_000_000_000_000_000 + key, schema="shop", table="wide", op="update",
            columns=image(key, width, 2), old_columns=image(key, width, 1), topic=protocol,
            partition=0, offset=0,
        )
        for key in range(rows)
    ]  # fmt: skip
    messages = make_encoder(protocol).encode(events)
    count = len(messages)
    return pa.table(
        {
            "topic": [protocol] * count,
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array(range(count), pa.int64()),
            "key": [message.key for message in messages],
            "value": [message.value for message in messages],
            "source_file": ["bench"] * count,
            "batch_id": pa.array([1] * count, pa.int64()),
        }
    )


def decoder_for(directory: Path) -> PartitionDecoder:
    path = directory / "pipeline.yaml"
    topics = {protocol: {"protocol": protocol, "partitions": 1} for protocol in PROTOCOLS}
    path.write_text(yaml.safe_dump({"lake": "lake", "topics": topics}))
    return PartitionDecoder.for_config(load_config(path))


def ns_per_value(decoder: PartitionDecoder, bronze: pa.Table, values: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        rows = sum(out.num_rows for out in decoder(iter(bronze.to_batches(max_chunksize=10_000))))
        best = min(best, time.process_time() - started)
    assert rows >= bronze.num_rows, "every record decodes to at least one output row"
    return best * 1e9 / values


def run(widths: list[int]) -> dict:
    load_start = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        decoder = decoder_for(Path(directory))
        for protocol in PROTOCOLS:
            per_width = {}
            for width in widths:
                rows = VALUES_PER_WIDTH // (2 * width)
                cost = ns_per_value(decoder, bronze_of(protocol, width, rows), 2 * width * rows)
                per_width[str(width)] = round(cost, 1)
                print(f"{protocol:14s} {width:5d} columns: {cost:7.1f} ns per value", flush=True)
            narrowest = per_width[str(min(widths))]
            results[protocol] = {
                "ns_per_value": per_width,
                "ratio_to_narrowest": {w: round(c / narrowest, 2) for w, c in per_width.items()},
            }
    worst = max(r for p in results.values() for r in p["ratio_to_narrowest"].values())
    return {
        "benchmark": "wide_rows",
        "values_per_width": VALUES_PER_WIDTH,
        "machine": machine_report(load_start),
        "protocols": results,
        "worst_ratio": worst,
        "target_ratio": TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[10, 100, 200, 400, 800])
    parser.add_argument("--out", type=Path, default=Path("bench/results/wide-rows.json"))
    args = parser.parse_args()
    result = run(sorted(args.widths))
    print(f"worst cost against the narrowest: {result['worst_ratio']}x (target <= {TARGET_RATIO}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
