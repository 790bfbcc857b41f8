"""The results a scheduled run's Spark jobs left (``--result-file``), folded into one summary.

    summarize_run(folder) -> RunSummary    # what each stage did, watermarks, gold rows
    summary.changed_changefeeds            # whose gold changed (for asset events)

Plain JSON: a scheduler task reads this without Spark or Delta, to put a run's summary in its
log and in XCom.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ticdc_lake.redact import redact_value


class MissingResultError(FileNotFoundError):
    """A stage ran but left no result file (it did not get as far as writing one)."""


@dataclass(frozen=True)
class RunSummary:
    stages: dict[str, dict[str, Any]]  # stage -> its counts
    failures: dict[str, str] = field(default_factory=dict)
    watermarks: dict[str, int | None] = field(default_factory=dict)  # changefeed -> gold TS
    modes: dict[str, str] = field(default_factory=dict)  # changefeed -> watermark|cutoff|...
    gold_rows: dict[str, int] = field(default_factory=dict)  # schema.table -> rows
    changed_changefeeds: tuple[str, ...] = ()  # gold written by this run

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": self.stages,
            "failures": self.failures,
            "watermarks": self.watermarks,
            "modes": self.modes,
            "gold_rows": self.gold_rows,
            "changed_changefeeds": list(self.changed_changefeeds),
        }

    def lines(self) -> list[str]:
        lines = [f"{stage}: {json.dumps(counts)}" for stage, counts in self.stages.items()]
        lines += [
            f"changefeed {name}: gold {self.modes.get(name, '?')} at TS {ts}"
            for name, ts in self.watermarks.items()
        ]
        lines += [f"gold {name}: {rows} rows" for name, rows in sorted(self.gold_rows.items())]
        lines += [f"FAILED {what}: {why}" for what, why in sorted(self.failures.items())]
        return lines


def read_result(path: Path) -> dict[str, Any]:
    """One job's result file (pipeline.write_result_file): stage, seconds, result, failures.
    Credentials are masked again as it is read (redact.py): what the summary logs and returns
    as XCom never holds one, even from a file written by an older version or by hand."""
    if not path.is_file():
        raise MissingResultError(f"{path}: the job left no result (see its task log)")
    return redact_value(json.loads(path.read_text()))


def _counts(stage: str, result: dict[str, Any]) -> dict[str, Any]:
    """The counts worth showing of a stage's result (the full result stays in the file)."""
    if stage == "compact":
        feeds = result.get("changefeeds", [])
        tables = [table for feed in feeds for table in feed["tables"]]
        return {
            "tables": len(tables),
            "changes": sum(t["changes"] for t in tables),
            "upserts": sum(t["upserts"] for t in tables),
            "deletes": sum(t["deletes"] for t in tables),
            "ddl": sum(t["ddl"] for t in tables),
        }
    if stage == "backfill":
        plan, redecoded = result["plan"], result.get("redecode") or {}
        return {
            "start_ts": plan["start_ts"],
            "end_ts": plan["end_ts"],
            "batches": plan["batches"],
            "changefeeds": plan["changefeeds"],
            "records_redecoded": redecoded.get("records", 0),
        } | _counts("compact", result.get("compact") or {})
    if stage.startswith("quality"):
        checks = result.get("checks", [])
        return {key: result.get(key) for key in ("batch", "quarantined")} | {
            "checks": len(checks),
            "failed": [c["check"] for c in checks if not c["success"]],
        }
    if stage == "watermark":
        return {key: result.get(key) for key in ("resolved_read", "partitions", "advanced")} | {
            "watermarks": {f["name"]: f.get("watermark") for f in result.get("changefeeds", [])}
        }
    return {key: value for key, value in result.items() if isinstance(value, int | str | None)}


def summarize_run(folder: Path, stages: tuple[str, ...]) -> RunSummary:
    """Fold the named stages' result files in ``folder`` into one summary."""
    counts: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    compacted: dict[str, Any] | None = None
    for stage in stages:
        run = read_result(folder / f"{stage}.json")
        failures |= run.get("failures") or {}
        result = run.get("result")
        if result is None:
            counts[stage] = {"failed": True}
            continue
        counts[stage] = _counts(stage, result) | {"seconds": run.get("seconds")}
        if stage in ("compact", "backfill"):
            compacted = result if stage == "compact" else result.get("compact")
    if compacted is None:
        return RunSummary(counts, failures)
    feeds = compacted.get("changefeeds", [])
    return RunSummary(
        counts,
        failures,
        watermarks={feed["name"]: feed["target"] for feed in feeds},
        modes={feed["name"]: feed["mode"] for feed in feeds},
        gold_rows={t["table"]: t["rows"] for feed in feeds for t in feed["tables"]},
        changed_changefeeds=tuple(feed["name"] for feed in feeds if not feed["noop"]),
    )
