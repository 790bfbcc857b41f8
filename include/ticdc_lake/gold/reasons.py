"""Why a gold table is knowingly not what upstream held: the ``reason`` of its state row.

Reasons are joined by "; ". A run derives some afresh (the changefeed has no consistent cut,
changes held back) and carries the others (DDLs gold cannot reproduce, failures) from the
table's prior state.
"""

from __future__ import annotations

from ticdc_lake.config import ChangefeedConfig, PipelineConfig
from ticdc_lake.gold.state import CUTOFF, INCONSISTENT, TableState

FAILED = "compaction failed: "
# Reasons a run derives afresh (never carried from the prior state). Each starts with its
# marker and holds no separator.
NO_CONSISTENT_CUT = "no consistent cut: "
HELD_BACK = "held back: "
QUARANTINED = "quarantined: "  # records that may hold its changes are quarantined (missing.py)
_RUN_REASONS = (NO_CONSISTENT_CUT, HELD_BACK, QUARANTINED)
_SEPARATOR = "; "


def inconsistent_reason(config: PipelineConfig, feed: ChangefeedConfig) -> str:
    """Why a changefeed in ``inconsistent`` mode has no consistent cut."""
    canal = [t for t in feed.topics if config.topic(t).protocol == "canal-json"]
    canal = [t for t in canal if not config.topic(t).enable_tidb_extension]
    avro = [t for t in feed.topics if config.topic(t).protocol == "avro"]
    avro = [t for t in avro if not config.topic(t).enable_tidb_extension]
    causes = []
    if canal:
        causes.append(
            f"canal-json without the TiDB extension (topics {canal}): no commit TS, changes "
            "applied in Kafka order per key, DDLs applied after the changes of the run"
        )
    if avro:
        causes.append(
            f"avro without the TiDB extension (topics {avro}): no commit TS, changes applied "
            "in Kafka order per key"
        )
    if not causes:
        causes.append(
            "watermarks: false and no cutoff-ts: every change received is applied, in Kafka "
            "order per key"
        )
    return NO_CONSISTENT_CUT + ", and ".join(causes)


def held_reason(held: int, mode: str, target: int | None) -> str:
    """Changes without a commit TS a consistent run left for later."""
    where = "cut-off" if mode == CUTOFF else "target"
    advice = (
        "raise cutoff-ts once later data has landed"
        if mode == CUTOFF
        else "a later run applies them once a later TS arrives in their partitions"
    )
    return (
        f"{HELD_BACK}{held} changes without a commit TS (deletes after the last TS <= "
        f"{where} {target} in their partition): rows they delete may still be in gold ({advice})"
    )


def join_reasons(*reasons: str | None) -> str | None:
    return _SEPARATOR.join(r for r in reasons if r) or None


def carried_reasons(reason: str) -> list[str]:
    """The reasons of a prior state that a run carries: all but the run-derived ones."""
    return [part for part in reason.split(_SEPARATOR) if not part.startswith(_RUN_REASONS)]


def changefeed_mode(state: TableState) -> str | None:
    """The mode of the changefeed that wrote a state row; None when a DDL or a failure marked
    the table inconsistent in a changefeed of a consistent mode (which, the row cannot say)."""
    if state.mode != INCONSISTENT or state.reason is None:
        return state.mode
    if any(p.startswith(NO_CONSISTENT_CUT) for p in state.reason.split(_SEPARATOR)):
        return INCONSISTENT
    return None


def failed(state: TableState) -> bool:
    return bool(state.reason and state.reason.startswith(FAILED))
