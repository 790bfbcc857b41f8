"""Benchmark: each stage as the DAG runs it, a spark-submit of its own (issue 11).

    python -m bench.submit [--profile realistic|ddl-heavy] [--row-events 200000]
        [--out bench/results/submit-<profile>-<size>.json]

    make bench-submit

The DAG runs land, quality_bronze, decode, quality_silver, watermark, compact and
quality_gold, each as ``spark-submit spark_jobs/<job>.py`` (``dag_parts.spark_job``), so each
pays a new JVM: starting it, the SparkContext, the Python workers and the JIT's warm-up, which
``bench.pipeline``'s one session pays once. This runs the jobs so on ``local[2]`` over the
workload ``bench.pipeline`` generates (and caches): on a fresh lake, then again with nothing
new, as a schedule meets it between exports; beside the floor as a job of its own
(``bench/floor_job.py``). Each job's wall time is split into the stage's own work (its result
file's seconds) and the rest: the JVM, the session, the imports. Gold must hold the
generator's row counts at the watermark, read with plain delta-rs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.orchestration import (
    QUALITY_AFTER,
    STAGES,
    quality_task_id,
    spark_submit_binary,
    spark_submit_conf,
    spark_submit_env,
)

from bench.machine import machine_report
from bench.pipeline import (
    expected_counts,
    fresh_config,
    gold_rows,
    run_benchmark,
    workload,
)

REPO = Path(__file__).resolve().parents[1]
MASTER = "local[2]"


def jobs() -> list[tuple[str, str, list[str]]]:
    """(task id, spark_jobs/ script, its arguments) of the DAG's Spark tasks, in order."""
    found = []
    for stage in STAGES:
        found.append((stage, stage, []))
        if stage in QUALITY_AFTER:
            found.append((quality_task_id(stage), "quality", ["--stage", QUALITY_AFTER[stage]]))
    return found


def spark_submit(script: Path, arguments: list[str], folder: Path) -> float:
    """Seconds for one ``spark-submit`` as ``dag_parts.spark_job`` makes it, run in ``folder``;
    raises, with the job's output, when it fails."""
    python = sys.executable
    conf = spark_submit_conf(os.environ, python)
    command = [
        spark_submit_binary(os.environ, python), "--master", MASTER,
        *(part for key, value in conf.items() for part in ("--conf", f"{key}={value}")),
        str(script), *arguments,
    ]  # fmt: skip
    environ = os.environ | spark_submit_env(python, script.stem)
    started = time.perf_counter()
    done = subprocess.run(command, env=environ, cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} {arguments} exited {done.returncode}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")  # fmt: skip
    return seconds


def run_jobs(config_path: Path, results: Path) -> dict:
    """Every job of the DAG once: wall seconds, the stage's own seconds, and their sum."""
    timings = {}
    for task, script, arguments in jobs():
        result_file = results / f"{task}.json"
        arguments = ["--config", str(config_path), "--result-file", str(result_file), *arguments]
        wall = spark_submit(REPO / "spark_jobs" / f"{script}.py", arguments, results)
        work = json.loads(result_file.read_text())["seconds"]
        timings[task] = {"s": round(wall, 1), "stage_s": round(work, 1)}
        print(f"  {task}: {wall:.1f} s (its work {work:.1f} s)", flush=True)
    timings["total_s"] = round(sum(t["s"] for t in timings.values()), 1)
    return timings


def check_gold(layout: LakeLayout, manifest: dict) -> tuple[int, dict[str, int]]:
    """(watermark, gold row counts): every gold table, read with delta-rs, holds the
    generator's rows at the watermark the state table records."""
    (watermark,) = {state.watermark for state in read_state(layout.gold_state)}
    expected = expected_counts(manifest, watermark)
    found = gold_rows(layout, expected)
    if found != expected:
        raise AssertionError(f"gold at TS {watermark}: expected {expected}, read {found}")
    return watermark, found


def run(row_events: int, protocol: str, seed: int, profile: str) -> dict:
    load_start = os.getloadavg()
    directory, _ = workload(row_events, protocol, seed, profile)
    manifest = json.loads((directory / "manifest.json").read_text())
    scratch = directory / "submit"
    config = fresh_config(directory, scratch)
    print("floor:", flush=True)
    exports = [str(directory / "exports"), str(scratch / "floor")]
    floor = spark_submit(REPO / "bench" / "floor_job.py", exports, scratch)
    print(f"  {floor:.1f} s", flush=True)
    runs = {}
    for name in ("fresh", "nothing_new"):
        print(f"{name}:", flush=True)
        results = scratch / f"results-{name}"
        results.mkdir()
        runs[name] = run_jobs(config.source, results)
    watermark, gold = check_gold(LakeLayout(config.lake), manifest)
    stages = sum(runs["fresh"][stage]["s"] for stage in STAGES)
    return {
        "benchmark": "submit",
        "profile": profile,
        "protocol": protocol,
        "row_events": manifest["counts"]["row_events"],
        "export_bytes": manifest["counts"]["export_bytes"],
        "seed": seed,
        "spark": {"master": MASTER, "submit": "as dag_parts.spark_job: one JVM per job"},
        "machine": machine_report(load_start),
        "floor_s": round(floor, 1),
        "runs": runs,
        "stages_s": round(stages, 1),
        "stages_ratio_to_floor": round(stages / floor, 2),
        "with_quality_ratio_to_floor": round(runs["fresh"]["total_s"] / floor, 2),
        "watermark": watermark,
        "gold_rows": gold,
    }


def print_table(result: dict) -> None:
    machine = result["machine"]
    print(f"\n{result['profile']}, {result['protocol']}: {result['row_events']:,} row events, "
          f"each job a spark-submit on {result['spark']['master']}, load average "
          f"{machine['load_average_start']} -> {machine['load_average_end']}")  # fmt: skip
    print(f"floor (its own job): {result['floor_s']} s")
    print(f"{'job':<16}{'fresh':>8}{'its work':>10}{'nothing new':>13}")
    fresh, again = result["runs"]["fresh"], result["runs"]["nothing_new"]
    for task, _, _ in jobs():
        print(f"{task:<16}{fresh[task]['s']:>8.1f}{fresh[task]['stage_s']:>10.1f}"
              f"{again[task]['s']:>13.1f}")  # fmt: skip
    print(f"{'all jobs':<16}{fresh['total_s']:>8.1f}{'':>10}{again['total_s']:>13.1f}")
    print(f"the four stages: {result['stages_s']} s = {result['stages_ratio_to_floor']}x the "
          f"floor; with the checks {result['with_quality_ratio_to_floor']}x")  # fmt: skip


def main() -> None:
    run_benchmark(__doc__, 200_000, "submit-<profile>-<size>.json", run, print_table)


if __name__ == "__main__":
    main()
