"""Benchmark: the whole pipeline (land, decode, watermark, compact) beside its floor (issue 3).

    python -m bench.pipeline [--row-events 1000000] [--protocol open-protocol|craft]
        [--out bench/results/pipeline.json]

A generated workload (the canonical tables, every column type, replays, DDLs, an idle partition)
is written once as a Spark Kafka export would be: one Parquet file per Kafka partition with the
Spark Kafka source schema. It is cached under ``bench/.work/`` keyed by its parameters, so a
rerun skips generating it. Then, in one SparkSession on ``local[2]``:

1. the floor: Spark reads the same export files and writes them as Parquet, decoding nothing;
2. land, decode, watermark and compact on a fresh lake, each timed;
3. the floor again. The first floor run also warms the JVM (class loading, JIT, the first
   Python workers); the figure used is the faster of the two runs.

Events/s are row events of the workload (what the generator produced, replays not counted)
over wall seconds. The run fails unless every gold table holds exactly the generator's row
count at the watermark, read with plain delta-rs: a fast pipeline that is wrong is no result.
Writes ``--out`` (figures, parameters, machine, load average at start and end) and prints a
table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import yaml
from deltalake import DeltaTable
from ticdc_lake.config import load_config
from ticdc_lake.exports import write_export
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.spark import build_session
from ticdc_lake.stages.compact import compact
from ticdc_lake.stages.decode import decode
from ticdc_lake.stages.land import land
from ticdc_lake.stages.watermark import watermark
from ticdc_lake.workload import generate_workload
from ticdc_lake.workload.dispatch import route
from ticdc_lake.workload.output import (
    GenerateOptions,
    build_manifest,
    codec_settings,
    encode_routing,
    pipeline_config,
)

from bench.machine import machine_report

ROWS_PER_TRANSACTION = 3.8  # what the generator averages (at least): sizes the workload
WORK = Path(__file__).resolve().parent / ".work"
DRIVER_MEMORY = "6g"
STAGES = ("land", "decode", "watermark", "compact")


def work_dir() -> Path:
    WORK.mkdir(exist_ok=True)
    # Generated data stays out of git without a line in the repository's .gitignore.
    (WORK / ".gitignore").write_text("*\n")
    return WORK


def workload(row_events: int, protocol: str, seed: int) -> Path:
    """The generated workload's directory, generated on first use.

    Written here rather than by ``write_generated``: the bench needs one export file per
    Kafka partition and no expected.jsonl (the manifest holds the row counts it checks), and
    ``write_generated`` runs out of memory at 1M events with the garbage collector paused.
    """
    directory = work_dir() / f"pipeline-{protocol}-{row_events}-seed{seed}"
    done = directory / "complete"
    if done.exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    exports = directory / "exports"
    exports.mkdir(parents=True)
    options = GenerateOptions(
        protocol=protocol,
        seed=seed,
        transactions=math.ceil(row_events / ROWS_PER_TRANSACTION),
        partitions=4,
        idle_partitions=1,
        replays=3,
    )
    started = time.perf_counter()
    generated = generate_workload(options.seed, options.transactions)
    routing = route(
        generated,
        protocol,
        partitions=options.partitions,
        idle_partitions=options.idle_partitions,
        replays=options.replays,
    )
    encoded = encode_routing(routing, codec_settings(options))
    files = []
    # One file per Kafka partition, as a Spark batch read of Kafka writes them (one task, hence
    # one file, per topic partition).
    for (topic, partition), stream in sorted(encoded.items()):
        path = exports / f"part-{partition:05d}-{topic}.parquet"
        write_export(path, stream.records, "parquet")
        files.append(path)
    manifest = build_manifest(generated, routing, encoded, options, directory, files, None)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    config = pipeline_config(options, routing, has_schemas=False)
    (directory / "pipeline.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    done.write_text(f"generated in {time.perf_counter() - started:.0f} s\n")
    return directory


def fresh_config(directory: Path, run: Path):
    """The workload's pipeline config with a new, empty lake under ``run``."""
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    raw = yaml.safe_load((directory / "pipeline.yaml").read_text())
    raw["lake"] = str(run / "lake")
    raw["inputs"] = [str(directory / "exports" / "*")]
    path = run / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_config(path)


def floor(spark, directory: Path, run: Path) -> float:
    """Seconds for Spark to read the export files and write them as Parquet, decoding nothing."""
    target = run / "floor"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    spark.read.parquet(str(directory / "exports")).write.parquet(str(target))
    return time.perf_counter() - started


def expected_counts(manifest: dict, ts: int) -> dict[str, int]:
    """Each table's row count after the transactions up to the last resolved TS <= ``ts``."""
    counts: dict[str, int] = {}
    for point in manifest["resolved"]:
        if point["ts"] > ts:
            break
        counts = point["row_counts"] or counts
    return counts


def check_gold(layout: LakeLayout, result, manifest: dict) -> tuple[int, dict[str, int]]:
    """(watermark, gold row counts): every gold table read with delta-rs equals the manifest."""
    (feed,) = result.changefeeds
    expected = expected_counts(manifest, feed.target)
    found = {}
    for name in expected:
        schema, table = name.split(".")
        found[name] = DeltaTable(str(layout.gold(schema, table))).to_pyarrow_dataset().count_rows()
    reported = {name: table.rows for name, table in result.tables.items() if name in expected}
    if found != expected or reported != expected:
        raise AssertionError(
            f"gold at TS {feed.target} is wrong: expected {expected}, delta-rs reads {found}, "
            f"the stage reported {reported}"
        )
    return feed.target, found


def run(row_events: int, protocol: str, seed: int) -> dict:
    load_start = os.getloadavg()
    directory = workload(row_events, protocol, seed)
    manifest = json.loads((directory / "manifest.json").read_text())
    events = manifest["counts"]["row_events"]
    records = sum(manifest["counts"][k] for k in ("messages",))
    spark = build_session(
        "bench-pipeline",
        master="local[2]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    scratch = directory / "run"
    config = fresh_config(directory, scratch)
    floors = [floor(spark, directory, scratch)]
    seconds, results = {}, {}
    for name, stage in zip(STAGES, (land, decode, watermark, compact), strict=True):
        started = time.perf_counter()
        results[name] = stage(spark, config)
        seconds[name] = time.perf_counter() - started
        print(f"{name}: {seconds[name]:.1f} s", flush=True)
    floors.append(floor(spark, directory, scratch))
    spark.stop()
    watermark_ts, gold = check_gold(LakeLayout(config.lake), results["compact"], manifest)
    total = sum(seconds.values())
    best_floor = min(floors)
    return {
        "benchmark": "pipeline",
        "protocol": protocol,
        "row_events": events,
        "kafka_records": records,
        "export_bytes": manifest["counts"]["export_bytes"],
        "seed": seed,
        "spark": {"master": "local[2]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "floor_s": [round(s, 1) for s in floors],
        "floor_events_per_s": round(events / best_floor),
        "stages": {
            name: {"s": round(s, 1), "events_per_s": round(events / s)}
            for name, s in seconds.items()
        },
        "end_to_end_s": round(total, 1),
        "end_to_end_events_per_s": round(events / total),
        "ratio_to_floor": round(total / best_floor, 2),
        "target_ratio": 3.0,
        "watermark": watermark_ts,
        "gold_rows": gold,
        # Delta commits and DDL effects per gold table in the compaction run.
        "gold_commits": {n: t.commits for n, t in results["compact"].tables.items()},
        "gold_ddl": {n: t.ddl for n, t in results["compact"].tables.items()},
        "decoded": results["decode"].to_dict()["events"],
    }


def print_table(result: dict) -> None:
    events = result["row_events"]
    print(f"\n{result['protocol']}: {events:,} row events, {result['kafka_records']:,} Kafka "
          f"records, load average {result['machine']['load_average_start']} -> "
          f"{result['machine']['load_average_end']}")  # fmt: skip
    print(f"{'step':<12}{'seconds':>10}{'events/s':>12}")
    print(f"{'floor':<12}{min(result['floor_s']):>10.1f}{result['floor_events_per_s']:>12,}"
          f"   (runs: {result['floor_s']})")  # fmt: skip
    for name, figures in result["stages"].items():
        print(f"{name:<12}{figures['s']:>10.1f}{figures['events_per_s']:>12,}")
    print(f"{'end to end':<12}{result['end_to_end_s']:>10.1f}"
          f"{result['end_to_end_events_per_s']:>12,}")  # fmt: skip
    print(f"end to end / floor: {result['ratio_to_floor']}x (target <= 3x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-events", type=int, default=1_000_000)
    parser.add_argument("--protocol", choices=("open-protocol", "craft"), default="open-protocol")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/pipeline.json"))
    args = parser.parse_args()
    result = run(args.row_events, args.protocol, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print_table(result)


if __name__ == "__main__":
    main()
