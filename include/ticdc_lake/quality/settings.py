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
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ticdc_lake.errors import ConfigError

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


_KEYS = {"policies", "min-decode-rate", "max-lag", "stuck-after", "clock-skew", "sample-rows",
         "clock"}  # fmt: skip
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


def duration_seconds(where: str, value: Any) -> float:
    """``2h``, ``30m``, ``45s``, ``1d`` or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", str(value))
    if not match:
        raise ConfigError(f"{where} must be a duration like 90s, 30m, 2h or 1d, not {value!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _policies(where: str, raw: Any) -> dict[str, str]:
    policies = default_policies()
    if raw is None:
        return policies
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must map check names to a policy")
    for name, policy in raw.items():
        if name not in CHECKS:
            raise ConfigError(f"{where}: unknown check {name!r}; checks: {', '.join(CHECKS)}")
        if policy not in POLICIES:
            raise ConfigError(f"{where}.{name}: policy must be one of {POLICIES}, not {policy!r}")
        if policy == QUARANTINE and not CHECKS[name].rows:
            raise ConfigError(
                f"{where}.{name}: quarantine applies to row checks only "
                f"({', '.join(n for n, c in CHECKS.items() if c.rows)}); use fail or warn"
            )
        policies[name] = policy
    return policies


def quality_settings(raw: dict | None, source: str = "config") -> QualitySettings:
    """The validated settings of a raw `quality:` mapping (PipelineConfig.quality)."""
    raw = raw or {}
    where = f"{source}: quality"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; expected {sorted(_KEYS)}")
    rate = raw.get("min-decode-rate", 0.99)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ConfigError(f"{where}.min-decode-rate must be a number from 0 to 1, not {rate!r}")
    sample = raw.get("sample-rows", 5)
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample <= 100:
        raise ConfigError(f"{where}.sample-rows must be a whole number from 0 to 100")
    clock = raw.get("clock", "wall")
    if clock not in ("wall", "kafka"):
        raise ConfigError(f"{where}.clock must be wall or kafka, not {clock!r}")
    return QualitySettings(
        policies=_policies(f"{where}.policies", raw.get("policies")),
        min_decode_rate=float(rate),
        max_lag_seconds=duration_seconds(f"{where}.max-lag", raw.get("max-lag", "2h")),
        stuck_after_seconds=duration_seconds(f"{where}.stuck-after", raw.get("stuck-after", "30m")),
        clock_skew_seconds=duration_seconds(f"{where}.clock-skew", raw.get("clock-skew", "5m")),
        sample_rows=sample,
        clock=clock,
    )
