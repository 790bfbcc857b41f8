"""What a backfill of a TS range would touch, read from the lake with delta-rs (no Spark).

    plan_backfill(config, start_ts, end_ts, tables=()) -> BackfillPlan   # or BackfillParamError
    lake_versions(layout) -> {table: Delta version}

The plan names the bronze batches whose silver is re-derived (the same rule as
``stages.decode.batches_in_range``: a change, DDL or resolved event in the range, or a record
quarantined in a batch and produced at or after the range's start), the gold tables with
changes or DDL in the range, and the changefeeds whose gold is rebuilt to the watermark. It
checks the range first: against the lake's watermark (what gold reflects, from ``state/gold``)
and the requested tables against the gold tables the lake has.

``done`` says the same backfill (range and tables) already ran and nothing changed since: the
lake's table versions and the config are those it left. Running it again would write the same
rows, so it is skipped.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import open_table
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.orchestration import BackfillParamError, check_range, describe_ts

# As in silver/decode.py: a quarantined record stamped this long before the range's start may
# still hold a change of the range (clocks differ); earlier ones cannot.
CLOCK_SKEW_MS = 60_000


@dataclass(frozen=True)
class BackfillPlan:
    start_ts: int
    end_ts: int
    tables: tuple[str, ...]  # the gold tables asked for (empty: all)
    watermark: int  # the highest TS gold reflects
    batches: tuple[int, ...]  # bronze batches whose silver is re-derived
    tables_in_range: tuple[str, ...]  # gold tables with changes or DDL in the range
    changefeeds: tuple[str, ...]  # changefeeds whose gold is rebuilt
    rebuilt_tables: tuple[str, ...]  # their gold tables
    done: bool = False  # the same backfill ran and nothing changed since

    @property
    def key(self) -> dict:
        return {"start_ts": self.start_ts, "end_ts": self.end_ts, "tables": list(self.tables)}

    def to_dict(self) -> dict:
        return {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(self).items()}

    def lines(self) -> list[str]:
        what = ", ".join(self.tables) if self.tables else "all gold tables"
        lines = [
            f"backfill {describe_ts(self.start_ts)} .. {describe_ts(self.end_ts)} ({what}); "
            f"gold watermark {describe_ts(self.watermark)}",
            f"bronze batches whose silver is re-derived: {list(self.batches) or 'none'}",
            f"gold tables with changes or DDL in the range: {list(self.tables_in_range) or 'none'}",
            f"changefeeds rebuilt to the watermark: {list(self.changefeeds) or 'none'}, "
            f"gold tables rewritten: {list(self.rebuilt_tables) or 'none'}",
        ]
        if self.done:
            lines.append("already done: this backfill ran and the lake has not changed since")
        return lines


def _read(path: Path, columns: list[str], filters=None) -> pa.Table | None:
    try:
        table = open_table(path)
    except Exception:
        return None
    return table.to_pyarrow_dataset().to_table(columns=columns, filter=filters)


def _in_range(path: Path, columns: list[str], column: str, start: int, end: int) -> pa.Table:
    found = _read(path, columns, (pc.field(column) >= start) & (pc.field(column) <= end))
    return found if found is not None else pa.table({c: [] for c in columns})


_COORDINATES = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("bronze_batch", pa.int64())])  # fmt: skip


def _coordinates(table: pa.Table) -> pa.Table:
    """The table with its join keys in one type on both sides (an int64 partition would not
    join an int32 one)."""
    for field in _COORDINATES:
        index = table.schema.get_field_index(field.name)
        table = table.set_column(index, field, pc.cast(table.column(index), field.type))
    return table


def _quarantined_batches(layout: LakeLayout, start_ts: int) -> set[int]:
    """Batches of records quarantined and produced at or after (about) start_ts's time."""
    quarantined = _read(layout.quarantine, ["topic", "partition", "offset", "bronze_batch"])
    if quarantined is None or quarantined.num_rows == 0:
        return set()
    batches = pc.unique(quarantined.column("bronze_batch")).to_pylist()
    bronze = _read(
        layout.bronze,
        ["topic", "partition", "offset", "batch_id", "timestamp"],
        pc.field("batch_id").isin(batches),
    )
    since = dt.datetime.fromtimestamp(((start_ts >> 18) - CLOCK_SKEW_MS) / 1000, dt.UTC)
    stamped = bronze.rename_columns(["topic", "partition", "offset", "bronze_batch", "timestamp"])
    joined = _coordinates(quarantined).join(_coordinates(stamped), list(_COORDINATES.names))
    stamps = joined.column("timestamp")
    if getattr(stamps.type, "tz", None) is None:  # a bronze written without a zone holds UTC
        since = since.replace(tzinfo=None)
    late = joined.filter(pc.or_kleene(pc.is_null(stamps), pc.greater_equal(stamps, since)))
    return set(late.column("bronze_batch").to_pylist())


def _state(layout: LakeLayout) -> list[dict]:
    rows = _read(layout.gold_state, ["changefeed", "schema", "table", "watermark"])
    return rows.to_pylist() if rows is not None else []


def plan_backfill(
    config: PipelineConfig,
    start_ts: int,
    end_ts: int,
    tables: Iterable[str] = (),
    *,
    up_to_watermark: bool = False,
) -> BackfillPlan:
    """Check the range and tables, and say what a backfill would re-derive and rebuild.

    ``up_to_watermark`` ends a range reaching past the watermark at it (a data interval of
    ``airflow backfill create`` holding the watermark); a range given by hand must end below."""
    layout = LakeLayout(config.lake)
    state = _state(layout)
    owners = {qualified_name(row["schema"], row["table"]): row["changefeed"] for row in state}
    wanted = tuple(sorted({name.strip() for name in tables if name.strip()}))
    unknown = [name for name in wanted if name not in owners]
    if unknown:
        raise BackfillParamError(
            f"tables: {', '.join(unknown)} not among the lake's gold tables "
            f"({', '.join(sorted(owners)) or 'none yet'}); name them as schema.table"
        )
    feeds = {owners[name] for name in wanted} if wanted else set(config.changefeeds)
    marks = [row["watermark"] for row in state if row["changefeed"] in feeds]
    marks = [mark for mark in marks if mark is not None]
    if up_to_watermark and marks and start_ts <= max(marks) < end_ts:
        end_ts = max(marks)
    check_range(start_ts, end_ts, max(marks) if marks else None)

    batches: set[int] = set()
    touched: set[str] = set()
    for path in (layout.changes, layout.ddl):
        rows = _in_range(path, ["schema", "table", "bronze_batch"], "commit_ts", start_ts, end_ts)
        batches |= set(rows.column("bronze_batch").to_pylist())
        touched |= {qualified_name(r["schema"], r["table"]) for r in rows.to_pylist() if r["table"]}
    resolved = _in_range(layout.resolved, ["bronze_batch"], "ts", start_ts, end_ts)
    batches |= set(resolved.column("bronze_batch").to_pylist())
    batches |= _quarantined_batches(layout, start_ts)

    # Every change of a re-derived batch may come out otherwise (after a config fix), not only
    # those in the range: the changefeeds of every topic in those batches are rebuilt.
    feed_of = {topic: feed.name for feed in config.changefeeds.values() for topic in feed.topics}
    rebuild = {feed_of[topic] for topic in _topics(layout, batches) if topic in feed_of}
    if wanted:
        touched &= set(wanted)
        rebuild &= feeds
    plan = BackfillPlan(
        start_ts=start_ts,
        end_ts=end_ts,
        tables=wanted,
        watermark=max(marks),
        batches=tuple(sorted(batches)),
        tables_in_range=tuple(sorted(touched)),
        changefeeds=tuple(sorted(rebuild)),
        rebuilt_tables=tuple(sorted(n for n, feed in owners.items() if feed in rebuild)),
    )
    return dataclasses.replace(plan, done=was_done(config, plan))


def _topics(layout: LakeLayout, batches: set[int]) -> set[str]:
    """The configured topics with records in these bronze batches (from silver: partitions)."""
    topics: set[str] = set()
    chosen = pc.field("bronze_batch").isin(sorted(batches))
    for path in (layout.changes, layout.ddl, layout.resolved, layout.quarantine):
        rows = _read(path, ["topic"], chosen) if batches else None
        topics |= set(pc.unique(rows.column("topic")).to_pylist()) if rows is not None else set()
    return topics


# --- idempotency: what a finished backfill left ---------------------------------------------

BACKFILLS_SCHEMA = pa.schema(
    [
        ("start_ts", pa.int64()),
        ("end_ts", pa.int64()),
        ("tables", pa.string()),  # JSON list
        ("config_sha256", pa.string()),
        ("versions", pa.string()),  # JSON {table: Delta version} after the backfill
        ("batches", pa.list_(pa.int64())),
        ("changefeeds", pa.list_(pa.string())),
        ("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)


def config_fingerprint(config: PipelineConfig) -> str:
    return hashlib.sha256(Path(config.source).read_bytes()).hexdigest()


def lake_versions(layout: LakeLayout) -> dict[str, int]:
    """The Delta version of every table of the lake (gold ones as the state table lists them);
    -1 for a table not there."""
    paths = {name: path for name, path in layout.tables().items()}
    for row in _state(layout):
        name = qualified_name(row["schema"], row["table"])
        paths[f"gold:{name}"] = layout.gold(row["schema"], row["table"])
    versions = {}
    for name, path in sorted(paths.items()):
        try:
            versions[name] = open_table(path).version()
        except Exception:
            versions[name] = -1
    return versions


def was_done(config: PipelineConfig, plan: BackfillPlan) -> bool:
    """Whether the same backfill ran last with this config and left the lake as it is now."""
    layout = LakeLayout(config.lake)
    records = _read(layout.backfills, ["start_ts", "end_ts", "tables", "config_sha256",
                                       "versions", "finished_at"])  # fmt: skip
    if records is None:
        return False
    same = [
        row
        for row in records.to_pylist()
        if row["start_ts"] == plan.start_ts
        and row["end_ts"] == plan.end_ts
        and json.loads(row["tables"]) == list(plan.tables)
    ]
    if not same:
        return False
    last = max(same, key=lambda row: row["finished_at"])
    return last["config_sha256"] == config_fingerprint(config) and json.loads(
        last["versions"]
    ) == lake_versions(layout)
