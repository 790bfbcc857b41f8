"""What a check found, and the two tables it goes to: quality/results and quality/quarantine.

Every validation appends its outcomes to ``layout.quality_results`` in one commit whose Delta
app id is ``quality-<stage>`` and whose version is the batch it validated (a land batch, the
highest bronze batch decoded, the state table's version): a rerun over the same batch commits
nothing. Failing silver rows under the ``quarantine`` policy go to ``layout.quality_quarantine``
with the check's name; compaction leaves them out.

The results table is partitioned by stage and by the month the validation started (UTC), and
keeps file statistics only for the columns its readers prune on (``STATS_COLUMNS``): the
writer (quality.store) compacts a stage's month into one file, and the readers
(quality.history) read a stage's newest files only. A table an older version created has
neither (one file per validation, every column's statistics): it is read and appended to as
it is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

RESULTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("stage", pa.string()),  # bronze | silver | gold
        ("batch", pa.int64()),  # what was validated: land batch, bronze batch, state version
        ("changefeed", pa.string()),
        ("table", pa.string()),  # the table the check is about (schema.table for gold)
        ("check", pa.string()),
        ("policy", pa.string()),  # fail | warn | quarantine
        ("success", pa.bool_()),
        ("observed", pa.string()),  # JSON
        ("unexpected_count", pa.int64()),
        ("sample", pa.string()),  # JSON list of failing rows (a few)
        ("message", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("ge_result", pa.string()),  # Great Expectations' JSON result
        ("month", pa.string()),  # YYYY-MM of started_at (UTC): a partition column
    ]
)
PARTITION_BY = ("stage", "month")
# The columns the readers prune files on, and what identifies a run: statistics of the others
# (64-character prefixes of GE's JSON, samples, messages) only make each file's entry in the log,
# which every reader loads, larger.
STATS_COLUMNS = ("run_id", "batch", "check", "started_at", "finished_at")


@dataclass(frozen=True)
class CheckOutcome:
    check: str
    success: bool
    observed: Any = None  # anything JSON can hold
    unexpected_count: int = 0
    sample: tuple[dict, ...] = ()
    message: str = ""
    changefeed: str | None = None
    table: str | None = None
    ge_result: dict | None = None

    def describe(self) -> str:
        where = "/".join(part for part in (self.changefeed, self.table) if part)
        status = "ok" if self.success else "FAILED"
        text = f"{self.check}{f' [{where}]' if where else ''}: {status}"
        if not self.success:
            text += f", {self.unexpected_count} unexpected"
        return text + (f": {self.message}" if self.message else "")


@dataclass
class StageValidation:
    """One stage's validation of one batch: its outcomes and each one's policy."""

    run_id: str
    stage: str
    batch: int | None  # None: nothing new to validate
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    outcomes: list[tuple[CheckOutcome, str]] = field(default_factory=list)  # (outcome, policy)
    quarantined: int = 0
    written: bool = False

    def failures(self, policy: str | None = None) -> list[CheckOutcome]:
        return [o for o, p in self.outcomes if not o.success and (policy is None or p == policy)]

    @property
    def failed(self) -> bool:
        """A `fail` check failed: the stage's job exits non-zero."""
        return bool(self.failures("fail"))

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "run_id": self.run_id,
                "stage": self.stage,
                "batch": self.batch,
                "changefeed": outcome.changefeed,
                "table": outcome.table,
                "check": outcome.check,
                "policy": policy,
                "success": outcome.success,
                "observed": _json(outcome.observed),
                "unexpected_count": outcome.unexpected_count,
                "sample": _json(list(outcome.sample)),
                "message": outcome.message,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
                "ge_result": _json(outcome.ge_result) if outcome.ge_result else None,
                "month": month(self.started_at),
            }
            for outcome, policy in self.outcomes
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stage": self.stage,
            "batch": self.batch,
            "failed": self.failed,
            "written": self.written,
            "quarantined": self.quarantined,
            "checks": [
                {"check": o.describe(), "policy": p, "success": o.success} for o, p in self.outcomes
            ],
        }

    def headline(self) -> str:
        """One line: what was validated and how many checks passed."""
        if self.batch is None:
            text = "nothing new to validate"
            if self.failed:
                bad = ", ".join(o.check for o in self.failures("fail"))
                text += f"; its last validation failed: {bad}"
            return text
        passed = sum(o.success for o, _ in self.outcomes)
        text = f"batch {self.batch}: {passed} of {len(self.outcomes)} checks passed"
        return text + (f", {self.quarantined} rows quarantined" if self.quarantined else "")

    def summary(self) -> str:
        """The headline, then each failed check with its policy."""
        lines = [f"DQ {self.stage} {self.headline()}"]
        if self.batch is not None:
            lines += [f"  [{p}] {o.describe()}" for o, p in self.outcomes if not o.success]
        return "\n".join(lines)


def month(moment: dt.datetime) -> str:
    """The partition a validation started at ``moment`` goes to: its UTC month, ``YYYY-MM``."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m")


def _json(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def results_table(validation: StageValidation, columns: Sequence[str] | None = None) -> pa.Table:
    """The validation's rows; with ``columns`` (a table's own), only those: a table an older
    version created has no ``month``."""
    table = pa.Table.from_pylist(validation.rows(), RESULTS_SCHEMA)
    return table if columns is None else table.select(list(columns))
