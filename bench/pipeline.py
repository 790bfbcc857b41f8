"""Benchmark: the whole pipeline (land, decode, watermark, compact) beside its floor (issues 3, 11).

    python -m bench.pipeline [--profile realistic|ddl-heavy] [--row-events 1000000]
        [--protocol open-protocol|craft] [--out bench/results/pipeline-<profile>-<size>.json]

    make bench-pipeline       # both profiles at 1M row events
    make bench-pipeline-4m    # both profiles at 4M row events

A generated workload (`--profile`: ``realistic``, a production-like changefeed of growing shop
tables with a few ALTERs and ~1% replays, or ``ddl-heavy``, small churned tables with every
type's extreme values and a DDL per ~200 transactions; both with every column type and an idle
partition) is written once, streamed to disk with bounded memory (`stream_generated`), as a
Spark Kafka export would be: one Parquet file per Kafka partition with the Spark Kafka source
schema. It is cached under ``bench/.work/`` keyed by its parameters, so a rerun skips
generating it. Then, in one SparkSession on ``local[2]``:

1. the floor: Spark reads the same export files and writes them as Parquet, decoding nothing,
   FLOOR_RUNS times: the first warms the JVM (class loading, JIT) for the floor and the
   stages alike;
2. land, decode, watermark and compact on a fresh lake, each timed;
3. the floor once more. The figure used is the fastest run: with one warm run only, the
   figure swung between 1.6 and 2.9 s on one machine (the run after the stages is sometimes
   slow), and a slow floor flatters every ratio.
4. with Spark stopped, the decode stage's decoder (`PartitionDecoder`) over all of bronze in
   this process, on one core, writing nothing: the stage's ceiling per core. The decode ratio
   is the stage's events/s over that rate times the cores (target >= 0.5).

Events/s are row events of the workload (what the generator produced, replays not counted)
over wall seconds. The run fails unless every gold table holds exactly the generator's row
count at the watermark, read with plain delta-rs: a fast pipeline that is wrong is no result.
Writes ``--out`` (figures, parameters, machine, load average at start and end and sampled
during the run, peak RSS of the Python driver, the JVM and Spark's Python workers per stage,
Delta commits per table per stage, the generation's time and peak RSS) and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable
from ticdc_lake.bronze.land import land
from ticdc_lake.config import load_config
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.sample.workload.generator import DDL_HEAVY, DEFAULT_PROFILE, PROFILES, REALISTIC
from ticdc_lake.sample.workload.output import GenerateOptions
from ticdc_lake.sample.workload.streaming import stream_generated
from ticdc_lake.silver.bronze_splits import batch_records
from ticdc_lake.silver.decode import BRONZE_COLUMNS, PartitionDecoder, decode
from ticdc_lake.silver.watermark import watermark

from bench.machine import ProcessSampler, machine_report

# What the generator averages per transaction (at least): sizes the workload. ddl-heavy keeps
# the figure of the first benchmarks, so its 1M workload is theirs.
ROWS_PER_TRANSACTION = {DDL_HEAVY: 3.8, REALISTIC: 3.7}
WORK = Path(__file__).resolve().parent / ".work"
DRIVER_MEMORY = "6g"
STAGES = ("land", "decode", "watermark", "compact")
CORES = 2
TARGET_RATIO = {REALISTIC: 3.0, DDL_HEAVY: 6.0}  # end to end / floor (issue 11)
TARGET_LAND_RATIO = 1.5  # land / floor
TARGET_DECODE_RATIO = 0.5  # decode stage events/s / (in-process events/s x cores)
IN_PROCESS_RECORDS = 200_000  # bronze records read at a time for decode_in_process
FLOOR_RUNS = 3  # before the stages (one more after them)


def work_dir() -> Path:
    WORK.mkdir(exist_ok=True)
    # Generated data stays out of git without a line in the repository's .gitignore.
    (WORK / ".gitignore").write_text("*\n")
    return WORK


def workload(
    row_events: int, protocol: str, seed: int, profile: str, tenants: int = 1
) -> tuple[Path, dict]:
    """The generated workload's directory, generated on first use, and how generating it went
    (seconds, peak RSS of this process: nothing else has run in it yet)."""
    name = f"pipeline-{profile}-{protocol}-{row_events}-seed{seed}"
    directory = work_dir() / (name if tenants == 1 else f"{name}-tenants{tenants}")
    done = directory / "complete"
    if done.exists():
        return directory, json.loads(done.read_text())
    shutil.rmtree(directory, ignore_errors=True)
    options = GenerateOptions(
        protocol=protocol,
        profile=profile,
        seed=seed,
        transactions=math.ceil(row_events / ROWS_PER_TRANSACTION[profile]),
        partitions=4,
        idle_partitions=1,
        tenants=tenants,
    )
    started = time.perf_counter()
    stream_generated(directory, options, export_per_partition=True)
    generated = {
        "s": round(time.perf_counter() - started, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    done.write_text(json.dumps(generated) + "\n")
    return directory, generated


def cut_exports(directory: Path, pieces: int) -> Path:
    """A folder beside the workload (made once) with its config and each of its export files
    cut into ``pieces`` files of consecutive records, ``exports/<stem>-<piece>.parquet``."""
    out = directory / f"cut-{pieces}"
    if (out / "complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    (out / "exports").mkdir(parents=True)
    shutil.copy(directory / "pipeline.yaml", out / "pipeline.yaml")
    for source in sorted((directory / "exports").glob("*.parquet")):
        table = pq.read_table(source)
        size = -(-table.num_rows // pieces)
        for piece in range(pieces):
            part = table.slice(piece * size, size)
            pq.write_table(part, out / "exports" / f"{source.stem}-{piece:05d}.parquet")
    (out / "complete").write_text("")
    return out


def fresh_config(directory: Path, run: Path, exports: Path | None = None):
    """The workload's pipeline config with a new, empty lake under ``run``, landing the files
    in ``exports`` (default: the workload's)."""
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    raw = yaml.safe_load((directory / "pipeline.yaml").read_text())
    raw["lake"] = str(run / "lake")
    raw["inputs"] = [str((exports or directory / "exports") / "*")]
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


def decode_in_process(config) -> float:
    """Seconds for the decode stage's decoder to decode every bronze record in this process,
    batches of the stage's size, its output built but not written. Bronze is read
    IN_PROCESS_RECORDS at a time, each part before its clock starts (all of it at once, 4M
    ddl-heavy's 3.8 GB of messages and what decoding them holds, drove this process out of
    memory)."""
    bronze = DeltaTable(str(LakeLayout(config.lake).bronze)).to_pyarrow_dataset()
    files = [fragment.metadata for fragment in bronze.get_fragments()]
    size = batch_records([file.row_group(n) for file in files for n in range(file.num_row_groups)])
    scan = bronze.to_batches(columns=list(BRONZE_COLUMNS), batch_size=size)
    decoder = PartitionDecoder.for_config(config)
    seconds = 0.0
    while part := list(itertools.islice(scan, max(1, IN_PROCESS_RECORDS // size))):
        started = time.perf_counter()
        for _ in decoder(iter(part)):
            pass
        seconds += time.perf_counter() - started
    return seconds


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
    found = gold_rows(layout, expected)
    reported = {name: table.rows for name, table in result.tables.items() if name in expected}
    if found != expected or reported != expected:
        raise AssertionError(
            f"gold at TS {feed.target} is wrong: expected {expected}, delta-rs reads {found}, "
            f"the stage reported {reported}"
        )
    return feed.target, found


def gold_rows(layout: LakeLayout, names) -> dict[str, int]:
    """Rows of each gold table ("schema.table"), read with plain delta-rs."""
    found = {}
    for name in names:
        schema, table = name.split(".")
        found[name] = DeltaTable(str(layout.gold(schema, table))).to_pyarrow_dataset().count_rows()
    return found


def delta_commits(lake: Path) -> dict[str, int]:
    """Commits in each Delta table of the lake (its log's version files), by path in the lake."""
    found = {}
    for log in sorted(lake.rglob("_delta_log")):
        versions = [p for p in log.iterdir() if re.fullmatch(r"\d{20}\.json", p.name)]
        found[str(log.parent.relative_to(lake))] = len(versions)
    return found


def added(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        name: count - before.get(name, 0)
        for name, count in after.items()
        if count > before.get(name, 0)
    }


def run(row_events: int, protocol: str, seed: int, profile: str) -> dict:
    load_start = os.getloadavg()
    directory, generated = workload(row_events, protocol, seed, profile)
    manifest = json.loads((directory / "manifest.json").read_text())
    events = manifest["counts"]["row_events"]
    records = sum(manifest["counts"][k] for k in ("messages",))
    spark = build_session(
        "bench-pipeline",
        master=f"local[{CORES}]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    scratch = directory / "run"
    config = fresh_config(directory, scratch)
    with ProcessSampler() as floor_memory:
        floors = [floor(spark, directory, scratch) for _ in range(FLOOR_RUNS)]
    seconds, results, memory, commits = {}, {}, {}, {}
    lake = Path(config.lake)
    for name, stage in zip(STAGES, (land, decode, watermark, compact), strict=True):
        before = delta_commits(lake) if lake.exists() else {}
        started = time.perf_counter()
        with ProcessSampler() as memory[name]:
            results[name] = stage(spark, config)
        seconds[name] = time.perf_counter() - started
        commits[name] = added(before, delta_commits(lake))
        print(f"{name}: {seconds[name]:.1f} s", flush=True)
    floors.append(floor(spark, directory, scratch))
    spark.stop()
    in_process_s = decode_in_process(config)
    print(f"decode in process: {in_process_s:.1f} s", flush=True)
    all_commits = delta_commits(lake)
    gold_commits = {
        ".".join(Path(name).parts[-2:]): count
        for name, count in all_commits.items()
        if Path(name).parts[0] == "gold"
    }
    watermark_ts, gold = check_gold(LakeLayout(config.lake), results["compact"], manifest)
    total = sum(seconds.values())
    best_floor = min(floors)
    return {
        "benchmark": "pipeline",
        "profile": profile,
        "protocol": protocol,
        "row_events": events,
        "kafka_records": records,
        "export_bytes": manifest["counts"]["export_bytes"],
        "seed": seed,
        "ddl_events": manifest["counts"]["ddl_events"],
        "replayed_row_events": manifest["counts"]["replayed_row_events"],
        "generate": generated,
        "spark": {"master": f"local[{CORES}]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "floor_memory": floor_memory.report(),
        "floor_s": [round(s, 1) for s in floors],
        "floor_events_per_s": round(events / best_floor),
        "stages": {
            name: {
                "s": round(s, 1),
                "events_per_s": round(events / s),
                "delta_commits": commits[name],
                **memory[name].report(),
            }
            for name, s in seconds.items()
        },
        "gold_delta_commits": gold_commits,
        "delta_commits": all_commits,
        "end_to_end_s": round(total, 1),
        "end_to_end_events_per_s": round(events / total),
        "ratio_to_floor": round(total / best_floor, 2),
        "target_ratio": TARGET_RATIO[profile],
        "land_ratio_to_floor": round(seconds["land"] / best_floor, 2),
        "target_land_ratio": TARGET_LAND_RATIO,
        "decode_in_process_s": round(in_process_s, 1),
        "decode_ratio": round(in_process_s / (seconds["decode"] * CORES), 2),
        "target_decode_ratio": TARGET_DECODE_RATIO,
        "watermark": watermark_ts,
        "gold_rows": gold,
        # Delta commits and DDL effects per gold table in the compaction run.
        "gold_commits": {n: t.commits for n, t in results["compact"].tables.items()},
        "gold_ddl": {n: t.ddl for n, t in results["compact"].tables.items()},
        "decoded": results["decode"].to_dict()["events"],
    }


def print_table(result: dict) -> None:
    events = result["row_events"]
    machine = result["machine"]
    print(f"\n{result['profile']}, {result['protocol']}: {events:,} row events, "
          f"{result['kafka_records']:,} Kafka records, load average "
          f"{machine['load_average_start']} -> {machine['load_average_end']}")  # fmt: skip
    print(f"{'step':<12}{'seconds':>10}{'events/s':>12}{'JVM MB':>9}{'workers PSS':>12}{'load':>7}")
    print(f"{'floor':<12}{min(result['floor_s']):>10.1f}{result['floor_events_per_s']:>12,}"
          f"   (runs: {result['floor_s']})")  # fmt: skip
    for name, figures in result["stages"].items():
        rss = figures["peak_rss_mb"]
        print(f"{name:<12}{figures['s']:>10.1f}{figures['events_per_s']:>12,}"
              f"{rss['jvm_driver']:>9,}{rss['python_workers_total_pss']:>12,}"
              f"{figures['load_average_1m']['max']:>7}")  # fmt: skip
    print(f"{'end to end':<12}{result['end_to_end_s']:>10.1f}"
          f"{result['end_to_end_events_per_s']:>12,}")  # fmt: skip
    print(f"end to end / floor: {result['ratio_to_floor']}x (target <= {result['target_ratio']}x)")
    print(f"land / floor: {result['land_ratio_to_floor']}x "
          f"(target <= {result['target_land_ratio']}x)")  # fmt: skip
    print(f"decode in process, one core: {result['decode_in_process_s']} s; decode ratio "
          f"{result['decode_ratio']} (target >= {result['target_decode_ratio']})")  # fmt: skip
    print(f"gold Delta commits per table: {result['gold_delta_commits']}")
    print(
        f"generated in {result['generate']['s']} s, peak RSS {result['generate']['peak_rss_mb']} MB"
    )


RESULTS = Path(__file__).resolve().parent / "results"


def size_label(row_events: int) -> str:
    """1000000 -> 1m, 4000000 -> 4m, 20000 -> 20k."""
    for unit, scale in (("m", 1_000_000), ("k", 1_000)):
        if row_events % scale == 0:
            return f"{row_events // scale}{unit}"
    return str(row_events)


def run_benchmark(
    doc: str,
    row_events: int,
    out: str,
    run: Callable[[int, str, int, str], dict],
    print_table: Callable[[dict], None],
) -> None:
    """A benchmark over the generated workload as a command: its parameters, and ``--out``
    (default ``bench/results/<out>``, where ``out`` may name the profile and size); ``run``'s
    result is written there as JSON and printed by ``print_table``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE)
    parser.add_argument("--row-events", type=int, default=row_events)
    parser.add_argument("--protocol", choices=("open-protocol", "craft"), default="open-protocol")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help=f"default bench/results/{out}")
    args = parser.parse_args()
    size = size_label(args.row_events)
    path = args.out or RESULTS / out.replace("<profile>", args.profile).replace("<size>", size)
    result = run(args.row_events, args.protocol, args.seed, args.profile)
    write_result(result, path, print_table)


def write_result(result: dict, path: Path, print_table: Callable[[dict], None]) -> None:
    """``result`` as JSON at ``path``, and printed by ``print_table``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print_table(result)


def main() -> None:
    run_benchmark(__doc__, 1_000_000, "pipeline-<profile>-<size>.json", run, print_table)


if __name__ == "__main__":
    main()
