"""The `quality:` section of the pipeline config: a policy per check, and the checks' limits.

    quality:
      policies:                 # check name -> fail | warn | quarantine (defaults: CHECKS)
        decode_rate: fail
        freshness_lag: warn
      min-decode-rate: 0.99     # per topic: decoded / bronze records of the batch
      max-lag: 2h               # freshness SLO: now - physical time of the watermark
      stuck-after: 30m          # a partition this far behind its changefeed's newest is stuck
      clock-skew: 5m            # a commit TS this far past now is not plausible
      sample-rows: 5            # failing rows kept per check in quality/results
      clock: wall               # wall | kafka: "now" for freshness (kafka: the newest record
                                # landed, for replays of old exports)

`fail` makes the stage's DQ job exit non-zero (the DAG stops), `warn` records and goes on,
`quarantine` (row checks only) moves the failing rows to quality/quarantine with the check's
name, and the next stage leaves them out.

The section is checked with the rest of the file when it is loaded (``ticdc_lake.config``'s
schema: every mistake at once, each with its line), before any stage or check runs; a loaded
config's ``quality`` is the QualitySettings below. Durations are seconds or text such as 90s,
30m, 2h, 1d, from 0 to 365 days.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

FAIL, WARN, QUARANTINE = "fail", "warn", "quarantine"
POLICIES = (FAIL, WARN, QUARANTINE)


@dataclass(frozen=True)
class CheckSpec:
    stage: str
    policy: str  # the default
    rows: bool  # failing rows can be quarantined (silver change rows)
    about: str


CHECKS: dict[str, CheckSpec] = {
    "bronze_schema": CheckSpec("bronze", FAIL, False, "required fields present and typed"),
    "bronze_required_fields": CheckSpec("bronze", FAIL, False, "topic/partition/offset not null"),
    "bronze_offset_unique": CheckSpec("bronze", FAIL, False, "(topic, partition, offset) unique"),
    "bronze_offset_gaps": CheckSpec("bronze", WARN, False, "offsets contiguous per partition"),
    "bronze_value_present": CheckSpec("bronze", WARN, False, "value or key present"),
    "bronze_conflicts_reported": CheckSpec("bronze", FAIL, False, "every conflict recorded"),
    "landed_files_accounted": CheckSpec("bronze", FAIL, False, "every landed file reconciles"),
    "decode_rate": CheckSpec("silver", FAIL, False, "decoded / records per topic"),
    "bronze_silver_reconcile": CheckSpec("silver", FAIL, False, "records = decoded + quarantined"),
    "commit_ts_plausible": CheckSpec("silver", QUARANTINE, True, "commit TS a plausible TSO"),
    "op_allowed": CheckSpec("silver", FAIL, True, "op is insert, update or delete"),
    "handle_key_present": CheckSpec("silver", QUARANTINE, True, "row carries its handle key"),
    "ddl_ts_order": CheckSpec("silver", WARN, False, "DDL log in commit-TS order per table"),
    "watermark_regression": CheckSpec("silver", WARN, False, "no uncounted watermark regression"),
    "gold_key_unique": CheckSpec("gold", FAIL, False, "handle key unique"),
    "gold_ts_bound": CheckSpec("gold", FAIL, False, "no row past the state's TS"),
    "gold_row_count": CheckSpec("gold", FAIL, False, "row change = inserts - deletes"),
    "gold_column_types": CheckSpec("gold", FAIL, False, "column types as the DDL declares"),
    "gold_mode": CheckSpec("gold", WARN, False, "watermark mode where there are watermarks"),
    "freshness_lag": CheckSpec("gold", WARN, False, "watermark lag within max-lag"),
    "stuck_partition": CheckSpec("gold", WARN, False, "no partition stuck behind the others"),
}


def default_policies() -> dict[str, str]:
    return {name: spec.policy for name, spec in CHECKS.items()}


@dataclass(frozen=True)
class QualitySettings:
    policies: dict[str, str] = field(
        default_factory=lambda: {n: c.policy for n, c in CHECKS.items()}
    )
    min_decode_rate: float = 0.99
    max_lag_seconds: float = 2 * 3600
    stuck_after_seconds: float = 30 * 60
    clock_skew_seconds: float = 5 * 60
    sample_rows: int = 5
    clock: str = "wall"

    def policy(self, check: str) -> str:
        return self.policies[check]

    def replace(self, **changes: Any) -> QualitySettings:
        return dataclasses.replace(self, **changes)
