"""Benchmark: many gold tables, the realistic shop of many tenants, in two runs (issue 11).

    python -m bench.tenants [--tenants 1 100] [--row-events 300000]
        [--out bench/results/tenants.json]
    make bench-tenants

For each tenant count, the realistic workload of that many tenants (`bench.pipeline.workload`:
the shop's six tables in a schema per tenant, the same number of row events whatever the
count) is cut in two: the first half of each export file, then the rest, as two consecutive
exports. Both go through land, decode, watermark and compact in one SparkSession
(``local[2]``): the first compaction creates every gold table, the second merges into every
one, as a changefeed's runs do from then on. Each run fails unless every gold table holds the
generator's row count at its watermark. Writes each run's stage seconds per tenant count and
compaction's milliseconds per gold table: with many small tables, a run's cost is what each
table costs (its merge, its Delta log), not what its changes do.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from ticdc_lake.bronze.land import land
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.sample.workload.generator import REALISTIC
from ticdc_lake.silver.decode import decode
from ticdc_lake.silver.watermark import watermark

from bench.machine import machine_report
from bench.pipeline import (
    CORES,
    DRIVER_MEMORY,
    RESULTS,
    STAGES,
    check_gold,
    cut_exports,
    fresh_config,
    workload,
    write_result,
)

RUNS = ("first", "second")


def run_tenants(spark, tenants: int, row_events: int) -> dict:
    """Both runs over the workload of ``tenants`` tenants: each stage's seconds per run."""
    directory, generated = workload(row_events, "open-protocol", 0, REALISTIC, tenants)
    manifest = json.loads((directory / "manifest.json").read_text())
    halves = cut_exports(directory, len(RUNS)) / "exports"
    scratch = directory / "run"
    exports = scratch / "exports"
    config = fresh_config(directory, scratch, exports)
    exports.mkdir()
    runs = {}
    for half, run in enumerate(RUNS):
        for path in halves.glob(f"*-{half:05d}.parquet"):  # the next export beside the last
            os.link(path, exports / path.name)
        seconds, results = {}, {}
        for name, stage in zip(STAGES, (land, decode, watermark, compact), strict=True):
            started = time.perf_counter()
            results[name] = stage(spark, config)
            seconds[name] = round(time.perf_counter() - started, 2)
        watermark_ts, gold = check_gold(LakeLayout(config.lake), results["compact"], manifest)
        merged = [t for t in results["compact"].tables.values() if t.upserts or t.deletes]
        # No gold table yet when a partition's first half holds no resolved TS.
        per_table = round(seconds["compact"] * 1000 / len(gold), 1) if gold else None
        runs[run] = {
            "s": seconds,
            "watermark": watermark_ts,
            "gold_rows": sum(gold.values()),
            "tables_merged": len(merged),
            "compact_ms_per_table": per_table,
        }
        print(f"{tenants} tenants, {run} run: {seconds}", flush=True)
    return {
        "tenants": tenants,
        "gold_tables": len(manifest["tables"]),
        "row_events": manifest["counts"]["row_events"],
        "generate": generated,
        "runs": runs,
    }


def run(tenant_counts: list[int], row_events: int) -> dict:
    load_start = os.getloadavg()
    for tenants in tenant_counts:  # generated before Spark starts, as in bench.pipeline
        cut_exports(workload(row_events, "open-protocol", 0, REALISTIC, tenants)[0], len(RUNS))
    spark = build_session(
        "bench-tenants",
        master=f"local[{CORES}]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    try:
        results = [run_tenants(spark, tenants, row_events) for tenants in tenant_counts]
    finally:
        spark.stop()
    return {
        "benchmark": "tenants",
        "profile": REALISTIC,
        "protocol": "open-protocol",
        "spark": {"master": f"local[{CORES}]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "results": results,
    }


def print_table(result: dict) -> None:
    print(f"\n{'tenants':>8}{'tables':>8}{'run':>8}" + "".join(f"{s:>11}" for s in STAGES)
          + f"{'compact ms/table':>18}")  # fmt: skip
    for found in result["results"]:
        for run, figures in found["runs"].items():
            print(f"{found['tenants']:>8}{found['gold_tables']:>8}{run:>8}"
                  + "".join(f"{figures['s'][s]:>11.2f}" for s in STAGES)
                  + f"{figures['compact_ms_per_table']:>18}")  # fmt: skip
    machine = result["machine"]
    print(f"load average {machine['load_average_start']} -> {machine['load_average_end']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--row-events", type=int, default=300_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "tenants.json")
    args = parser.parse_args()
    write_result(run(args.tenants, args.row_events), args.out, print_table)


if __name__ == "__main__":
    main()
