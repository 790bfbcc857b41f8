"""Benchmark: what the data-quality checks cost, beside the stages they check (issue 9).

    python -m bench.quality [--profile realistic|ddl-heavy] [--row-events 1000000]
        [--protocol open-protocol|craft] [--out bench/results/quality.json]

The pipeline benchmark's workload (bench/pipeline.py, cached under ``bench/.work/``) through
``run_stages(..., quality=True)`` on a fresh lake, as ``ticdc-lake run`` does it: each stage,
then the checks of what it wrote (bronze after land, silver after decode, gold after compact)
in one GE context, then the HTML report. Writes each stage's seconds, its checks' seconds and
their ratio, and all checks together against the pipeline's time (target: at most 15%). The
run fails when a check with policy `fail` fails: checks that fail on a clean workload are no
result.
"""

from __future__ import annotations

import json
import os
import time

from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.orchestration import QUALITY_AFTER
from ticdc_lake.quality.report import write_report
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.sample.workload.generator import DEFAULT_PROFILE

from bench.machine import machine_report
from bench.pipeline import DRIVER_MEMORY, fresh_config, run_benchmark, workload

TARGET = 0.15


def run(row_events: int, protocol: str, seed: int, profile: str = DEFAULT_PROFILE) -> dict:
    load_start = os.getloadavg()
    directory, _ = workload(row_events, protocol, seed, profile)
    manifest = json.loads((directory / "manifest.json").read_text())
    spark = build_session(
        "bench-quality",
        master="local[2]",
        conf={"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false"},
    )
    config = fresh_config(directory, directory / "run-quality")
    result = run_stages(spark, config, quality=True)
    spark.stop()
    if result.failed:
        raise AssertionError(f"the run failed: {json.dumps(result.to_dict())[:3000]}")
    seconds = {run.stage: run.seconds for run in result.runs}
    started = time.perf_counter()
    write_report(config)  # what a run pays once more for the report (run_stages wrote it too)
    report_s = time.perf_counter() - started
    stages = {
        stage: {"s": round(seconds[stage], 1)}
        | (
            {
                "checks_s": round(seconds[f"quality-{QUALITY_AFTER[stage]}"], 1),
                "ratio": round(seconds[f"quality-{QUALITY_AFTER[stage]}"] / seconds[stage], 3),
            }
            if stage in QUALITY_AFTER
            else {}
        )
        for stage in seconds
        if not stage.startswith("quality-")
    }
    pipeline_s = sum(figures["s"] for figures in stages.values())
    checks_s = sum(s for stage, s in seconds.items() if stage.startswith("quality-")) + report_s
    return {
        "benchmark": "quality",
        "profile": profile,
        "protocol": protocol,
        "row_events": manifest["counts"]["row_events"],
        "seed": seed,
        "spark": {"master": "local[2]", "driver_memory": DRIVER_MEMORY},
        "machine": machine_report(load_start),
        "stages": stages,
        "report_s": round(report_s, 1),
        "pipeline_s": round(pipeline_s, 1),
        "checks_s": round(checks_s, 1),
        "checks_ratio": round(checks_s / pipeline_s, 3),
        "target_ratio": TARGET,
        "checks": {
            run.stage: [f"{o.check}: {'ok' if o.success else p}" for o, p in run.result.outcomes]
            for run in result.runs
            if run.stage.startswith("quality-")
        },
    }


def print_table(result: dict) -> None:
    machine = result["machine"]
    print(f"\n{result['protocol']}: {result['row_events']:,} row events, load average "
          f"{machine['load_average_start']} -> {machine['load_average_end']}")  # fmt: skip
    print(f"{'stage':<12}{'seconds':>10}{'checks s':>10}{'ratio':>8}")
    for name, figures in result["stages"].items():
        checks = (
            f"{figures['checks_s']:>10.1f}{figures['ratio']:>8.1%}" if "ratio" in figures else ""
        )
        print(f"{name:<12}{figures['s']:>10.1f}{checks}")
    print(f"report: {result['report_s']} s; all checks and the report: {result['checks_s']} s = "
          f"{result['checks_ratio']:.1%} of the pipeline's {result['pipeline_s']} s "
          f"(target <= {TARGET:.0%})")  # fmt: skip


def main() -> None:
    run_benchmark(__doc__, 1_000_000, "quality.json", run, print_table)


if __name__ == "__main__":
    main()
