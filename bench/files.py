"""Benchmark: land as the export files of a batch grow many (issue 11).

    python -m bench.files [--files 4 400 2000] [--row-events 1000000]
        [--out bench/results/files.json]
    make bench-files

The pipeline benchmark's realistic workload (`bench.pipeline.workload`, one export file per
Kafka partition) is cut into ``--files`` files of consecutive records each, as a day of hourly
exports from each partition would be; the same records whatever the count. In one
SparkSession (``local[2]``), after a warm-up land that is not reported, each count's files are
read and written as Parquet by Spark (the floor, best of two) and landed into a fresh lake,
twice. A batch's cost should follow its records, not its files: the figure is land against
the floor per file count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from ticdc_lake.bronze.land import land
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.sample.workload.generator import REALISTIC

from bench.machine import machine_report
from bench.pipeline import (
    CORES,
    DRIVER_MEMORY,
    RESULTS,
    cut_exports,
    floor,
    fresh_config,
    workload,
    write_result,
)

LANDS = 2


def run(file_counts: list[int], row_events: int) -> dict:
    load_start = os.getloadavg()
    directory, _ = workload(row_events, "open-protocol", 0, REALISTIC)
    sources = len(list((directory / "exports").glob("*.parquet")))
    cuts = {count: cut_exports(directory, max(1, count // sources)) for count in file_counts}
    spark = build_session(
        "bench-files",
        master=f"local[{CORES}]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    scratch = directory / "run-files"
    try:
        land(spark, fresh_config(directory, scratch))  # the JVM's and the workers' first land
        results = []
        for count, folder in cuts.items():
            floors = [round(floor(spark, folder, scratch), 2) for _ in range(2)]
            lands = []
            for _ in range(LANDS):
                config = fresh_config(folder, scratch)
                started = time.perf_counter()
                landed = land(spark, config)
                lands.append(round(time.perf_counter() - started, 2))
            results.append(
                {
                    "files": len(list((folder / "exports").iterdir())),
                    "records": landed.records_added,
                    "floor_s": floors,
                    "land_s": lands,
                    "land_ratio_to_floor": round(min(lands) / min(floors), 2),
                }
            )
            print(f"{count} files: {results[-1]}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "benchmark": "files",
        "profile": REALISTIC,
        "row_events": row_events,
        "spark": {"master": f"local[{CORES}]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "results": results,
    }


def print_table(result: dict) -> None:
    print(f"\n{'files':>7}{'records':>10}{'floor s':>10}{'land s':>10}{'land/floor':>12}")
    for found in result["results"]:
        print(f"{found['files']:>7}{found['records']:>10,}{min(found['floor_s']):>10.2f}"
              f"{min(found['land_s']):>10.2f}{found['land_ratio_to_floor']:>11}x")  # fmt: skip
    machine = result["machine"]
    print(f"load average {machine['load_average_start']} -> {machine['load_average_end']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[4, 400, 2000])
    parser.add_argument("--row-events", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "files.json")
    args = parser.parse_args()
    write_result(run(args.files, args.row_events), args.out, print_table)


if __name__ == "__main__":
    main()
