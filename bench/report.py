"""Benchmark: the data-quality report over a long history of quality/results (issue 52).

    python -m bench.report [--rows 10000 200000] [--repeat 3] [--baseline-include DIR]
        [--out bench/results/report.json]

For each size, a lake whose quality/results holds that many rows: hourly validations of the
three stages, seven checks each (21 rows an hour, so 200k rows are 13 months), each row with GE's
JSON of the size the checks record (~1.9 KB), decode rates and lags that change, and a failure
with a sample now and then. Built once and cached under ``bench/.work/report/``, in two layouts:

- ``partitioned``, this version's: every month before the last as one file per stage (what
  compaction leaves of it), then the last month's validations (9 days of them) one commit each
  through ``write_results``, the quality job's path, compactions included;
- ``per-validation``, what older versions wrote: unpartitioned, one file per validation with
  every column's statistics. Its files are delta-rs's own (written a day at a time into a
  scratch table partitioned by validation, then committed a day per commit): a reader loads the
  last checkpoint and the commits after it, so the commits' size does not change its cost.

Then, in a new process for each measurement (the api-server and each quality job render in
processes of their own, and a peak RSS must not carry a previous run's), the report as
``dq-report``, the plugin and a quality job render it (``render_report(lake_view(config))``):
its seconds and the process's peak RSS, and a process that only imports the same modules (the
floor under the RSS). ``--baseline-include`` renders with another checkout's code too (e.g.
main's ``include/``), for the figures before a change. Target: under 1 s and 300 MB at 200k
rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import yaml
from deltalake import DeltaTable, Schema, write_deltalake
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    Transaction,
    create_table_with_add_actions,
)
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.results import (
    PARTITION_BY,
    RESULTS_SCHEMA,
    CheckOutcome,
    StageValidation,
    month,
    results_table,
)
from ticdc_lake.quality.settings import CHECKS
from ticdc_lake.quality.store import TABLE_PROPERTIES, write_results

from bench.machine import machine_report
from bench.pipeline import RESULTS, WORK

TARGET_S, TARGET_MB = 1.0, 300
ROWS_PER_HOUR = len(CHECKS)  # every check of the three stages, once an hour
LAYOUTS = ("partitioned", "per-validation")
OLD_COLUMNS = [name for name in RESULTS_SCHEMA.names if name != "month"]
LAST_MONTH_DAYS = 9  # the last month's validations are written one commit each
_GE_RESULT = {
    "results": [
        {
            "success": True,
            "expectation_config": {
                "type": "expect_column_values_to_not_be_null",
                "kwargs": {"column": f"column_{i}", "batch_id": "b" * 40},
                "meta": {"index": i},
            },
            "result": {
                "element_count": 200000,
                "unexpected_count": 0,
                "unexpected_percent": 0.0,
                "partial_unexpected_list": [],
            },
            "meta": {},
            "exception_info": {
                "raised_exception": False,
                "exception_traceback": None,
                "exception_message": None,
            },
        }
        for i in range(5)
    ]
}


def validations(hours: int, end: dt.datetime) -> list[StageValidation]:
    """``hours`` hourly runs of each stage, ending at ``end``, in commit order."""
    rng = random.Random(hours)
    by_stage: dict[str, list[str]] = {}
    for name, spec in CHECKS.items():
        by_stage.setdefault(spec.stage, []).append(name)
    found = []
    for hour in range(hours):
        started = end - dt.timedelta(hours=hours - hour)
        for stage, checks in by_stage.items():
            begun = started + dt.timedelta(seconds=rng.randrange(900))
            finished = begun + dt.timedelta(seconds=rng.randrange(5, 60))
            run_id = uuid.UUID(int=rng.getrandbits(128)).hex
            validation = StageValidation(run_id, stage, hour, begun, finished)
            for check in checks:
                ok = rng.random() > 0.02
                observed = {"min_rate": 1 - rng.random() / 100, "quarantined": rng.randrange(3),
                            "lag_seconds": {"shop": rng.uniform(60, 3600)}}  # fmt: skip
                sample = () if ok else ({"id": rng.randrange(10**6), "table": "shop.orders"},)
                outcome = CheckOutcome(check, ok, observed, 0 if ok else 1, sample,
                                       "" if ok else f"{check} failed", "shop",
                                       ge_result=_GE_RESULT)  # fmt: skip
                validation.outcomes.append((outcome, CHECKS[check].policy))
            found.append(validation)
    return found


def write_config(root: Path) -> Path:
    path = root / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "lake": "lake",
                "topics": {"orders": {"protocol": "open-protocol", "partitions": 2}},
                "changefeeds": {"shop": {"topics": ["orders"]}},
            }
        )
    )
    return path


def _app_versions(runs: list[StageValidation]) -> CommitProperties:
    last = {validation.stage: validation.batch for validation in runs}
    return CommitProperties(
        app_transactions=[Transaction(f"quality-{stage}", batch) for stage, batch in last.items()]
    )


def build_partitioned(layout: LakeLayout, runs: list[StageValidation]) -> None:
    """Months before the last days a commit each (one file per stage, as compaction leaves a
    month: a month here is ~10 MB, under delta-rs's target file size), then the last days one
    commit per validation through write_results."""
    path = str(layout.quality_results)
    cut = runs[-1].started_at - dt.timedelta(days=LAST_MONTH_DAYS)
    older = [v for v in runs if v.started_at < cut]
    by_month: dict[str, list[StageValidation]] = {}
    for validation in older:
        by_month.setdefault(month(validation.started_at), []).append(validation)
    for chunk in by_month.values():
        write_deltalake(path, pa.concat_tables(results_table(v) for v in chunk), mode="append",
                        partition_by=list(PARTITION_BY), configuration=TABLE_PROPERTIES,
                        commit_properties=_app_versions(chunk))  # fmt: skip
    for validation in runs[len(older) :]:
        write_results(layout, validation, app_id=f"quality-{validation.stage}",
                      version=validation.batch)  # fmt: skip


def build_per_validation(layout: LakeLayout, runs: list[StageValidation]) -> None:
    """One unpartitioned file per validation, its statistics delta-rs's, a day per commit."""
    path = layout.quality_results
    path.mkdir(parents=True)
    scratch = path.parent / "scratch"
    created = False
    for start in range(0, len(runs), 72):
        day = runs[start : start + 72]
        shutil.rmtree(scratch, ignore_errors=True)
        rows = pa.concat_tables(
            results_table(v, OLD_COLUMNS).append_column(
                "_file", pa.repeat(v.run_id, len(v.outcomes))
            )
            for v in day
        )
        write_deltalake(str(scratch), rows, partition_by=["_file"])
        adds = []
        for line in (scratch / "_delta_log" / f"{0:020d}.json").read_text().splitlines():
            add = json.loads(line).get("add")
            if add:
                name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
                os.replace(scratch / add["path"], path / name)
                adds.append(AddAction(name, add["size"], {}, add["modificationTime"], True,
                                      add["stats"]))  # fmt: skip
        properties = _app_versions(day)
        schema = rows.schema.remove(rows.schema.get_field_index("_file"))
        if not created:
            create_table_with_add_actions(str(path), Schema.from_arrow(schema), adds,
                                          mode="append", commit_properties=properties)  # fmt: skip
            created = True
        else:
            DeltaTable(str(path)).create_write_transaction(
                adds, "append", schema, commit_properties=properties
            )
    shutil.rmtree(scratch, ignore_errors=True)


def lake(rows: int, layout_name: str) -> Path:
    """The cached lake's config: ``rows`` result rows in ``layout_name``."""
    root = WORK / "report" / f"{layout_name}-{rows}"
    config = root / "pipeline.yaml"
    if (root / "complete").is_file():
        return config
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    write_config(root)
    end = dt.datetime(2026, 11, 10, 12, tzinfo=dt.UTC)
    runs = validations(-(-rows // ROWS_PER_HOUR), end)
    started = time.perf_counter()
    build = build_partitioned if layout_name == "partitioned" else build_per_validation
    build(LakeLayout(load_config(config).lake), runs)
    print(f"built {layout_name} {rows:,} rows in {time.perf_counter() - started:.0f} s",
          flush=True)  # fmt: skip
    (root / "complete").touch()
    return config


_RENDER = """
import json, sys, time
def peak_mb():  # this process's own high-water mark (ru_maxrss keeps the forking parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
started = time.perf_counter()
from ticdc_lake.config import load_config
from ticdc_lake.quality.lakeview import lake_view
from ticdc_lake.quality.report import render_report
imported, imported_mb = time.perf_counter(), peak_mb()
if sys.argv[1] != "-":
    html = render_report(lake_view(load_config(sys.argv[1])))
    assert "Latest validation per stage" in html and "no runs yet" not in html
print(json.dumps({"import_s": imported - started, "render_s": time.perf_counter() - imported,
                  "imports_mb": imported_mb, "peak_rss_mb": peak_mb()}))
"""


def measure(config: Path | None, include: Path | None = None) -> dict:
    """One render in a new process (``config`` None: the imports alone)."""
    env = dict(os.environ)
    if include is not None:
        env["PYTHONPATH"] = str(include)
    done = subprocess.run([sys.executable, "-c", _RENDER, str(config) if config else "-"],
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"render failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def figures(config: Path | None, repeat: int, include: Path | None = None) -> dict:
    runs = [measure(config, include) for _ in range(repeat)]
    return {
        "render_s": round(statistics.median(r["render_s"] for r in runs), 3),
        "render_s_runs": [round(r["render_s"], 3) for r in runs],
        "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs)),
        "peak_rss_mb_runs": [round(r["peak_rss_mb"]) for r in runs],
        "after_imports_mb": round(statistics.median(r["imports_mb"] for r in runs)),
    }


def results_files(config: Path) -> int:
    return len(DeltaTable(str(LakeLayout(load_config(config).lake).quality_results)).file_uris())


def run(sizes: list[int], repeat: int, baseline: Path | None) -> dict:
    load_start = os.getloadavg()
    cases = []
    for rows in sizes:
        for layout_name in LAYOUTS:
            config = lake(rows, layout_name)
            case = {"rows": rows, "layout": layout_name, "files": results_files(config)}
            case |= figures(config, repeat)
            if baseline is not None:
                case["baseline"] = figures(config, 1, baseline)
            cases.append(case)
            print(json.dumps(case), flush=True)
    floor = figures(None, repeat)
    top = max(sizes)
    ours = [c for c in cases if c["rows"] == top and c["layout"] == "partitioned"]
    return {
        "benchmark": "report",
        "what": "render_report(lake_view(config)) in a new process: seconds after the imports, "
        "the process's peak RSS",
        "machine": machine_report(load_start),
        "imports_only": {"peak_rss_mb": floor["peak_rss_mb"]},
        "baseline_include": str(baseline) if baseline else None,
        "cases": cases,
        "target": {"rows": top, "render_s": TARGET_S, "peak_rss_mb": TARGET_MB},
        "target_met": all(c["render_s"] < TARGET_S and c["peak_rss_mb"] < TARGET_MB for c in ours),
    }


def print_table(result: dict) -> None:
    machine = result["machine"]
    print(f"\nload average {machine['load_average_start']} -> {machine['load_average_end']}; "
          f"imports alone: {result['imports_only']['peak_rss_mb']} MB")  # fmt: skip
    print(f"{'rows':>8} {'layout':<16}{'files':>7}{'render s':>10}{'peak MB':>9}"
          f"{'before s':>10}{'before MB':>10}")  # fmt: skip
    for case in result["cases"]:
        before = case.get("baseline") or {}
        print(f"{case['rows']:>8,} {case['layout']:<16}{case['files']:>7}"
              f"{case['render_s']:>10.3f}{case['peak_rss_mb']:>9}"
              f"{before.get('render_s', ''):>10}{before.get('peak_rss_mb', ''):>10}")  # fmt: skip
    target = result["target"]
    print(
        f"target at {target['rows']:,} rows: < {target['render_s']} s and "
        f"< {target['peak_rss_mb']} MB: {'met' if result['target_met'] else 'NOT met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 200_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-include", type=Path,
                        help="render with this include/ too (another checkout's code)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "report.json")
    args = parser.parse_args()
    result = run(args.rows, args.repeat, args.baseline_include)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print_table(result)


if __name__ == "__main__":
    main()
