"""The gold state table (layout.gold_state): per gold table, what it reflects.

One row per gold table, partitioned by changefeed; each compaction of a changefeed upserts its
rows in one commit (app id ``compact-state:<changefeed>#<generation>``), after the gold tables:

| column        | meaning                                                                      |
|---------------|------------------------------------------------------------------------------|
| changefeed    | the changefeed (config.changefeeds) the table's topics belong to             |
| schema, table | the upstream table; ``path`` is its gold Delta table                          |
| mode          | ``watermark`` (transactionally consistent at the changefeed's global         |
|               | watermark), ``cutoff`` (at the user's cut-off TS) or ``inconsistent`` (every  |
|               | change received, with no consistent cut; or a DDL gold cannot reproduce)     |
| watermark     | the TS the table reflects (watermark or cut-off; null when inconsistent      |
|               | because the changefeed has no TS)                                            |
| applied_ts    | the highest TS applied (= watermark in the consistent modes)                 |
| applied_batch | bronze batches up to this one are settled: their changes are all applied    |
|               | (or replays); the next run reads only later batches                          |
| rows          | rows in the gold table                                                        |
| columns       | JSON list of {name, type, mysql_type}: the gold columns and their origin     |
| handle_key    | the key gold rows are unique by                                              |
| dropped       | the upstream table was dropped (or renamed away); gold is empty               |
| reason        | why gold is knowingly not what upstream held, if it is not: the changefeed   |
|               | has no consistent cut (every ``inconsistent``-mode row says why), changes   |
|               | without a TS held back (the mode stays), or a DDL or a failure (the mode     |
|               | becomes ``inconsistent``); several joined by "; "                           |
| generation    | bumped when the changefeed's gold is rebuilt (mode change, ``rebuild=True``) |
| gold_version  | the gold table's Delta version after the compaction                          |
| zero_dates    | zero dates (0000-00-00, 2024-00-10) written to gold as NULL, counted since   |
|               | the table's generation began: so a NULL that was a zero date can be told     |
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields

import pyarrow as pa

from ticdc_lake.delta import delta_table_exists, merge_delta, open_table
from ticdc_lake.lake.names import qualified_name

# Columns added after the table's first version, with a default for rows written before.
LATER = ("zero_dates",)
WATERMARK = "watermark"
CUTOFF = "cutoff"
INCONSISTENT = "inconsistent"
MODES = (WATERMARK, CUTOFF, INCONSISTENT)

STATE_ARROW = pa.schema(
    [
        ("changefeed", pa.string()),
        ("schema", pa.string()),
        ("table", pa.string()),
        ("path", pa.string()),
        ("mode", pa.string()),
        ("watermark", pa.int64()),
        ("applied_ts", pa.int64()),
        ("applied_batch", pa.int64()),
        ("rows", pa.int64()),
        ("columns", pa.string()),
        ("handle_key", pa.list_(pa.string())),
        ("dropped", pa.bool_()),
        ("reason", pa.string()),
        ("generation", pa.int32()),
        ("gold_version", pa.int64()),
        ("zero_dates", pa.int64()),
    ]
)


@dataclass
class TableState:
    changefeed: str
    schema: str
    table: str
    path: str
    mode: str
    watermark: int | None
    applied_ts: int
    applied_batch: int
    rows: int = 0
    columns: str = "[]"
    handle_key: list[str] | None = None
    dropped: bool = False
    reason: str | None = None
    generation: int = 0
    gold_version: int | None = None
    zero_dates: int = 0

    @property
    def full_name(self) -> str:
        return qualified_name(self.schema, self.table)

    @property
    def column_types(self) -> dict[str, str]:
        """The gold columns' Delta types, as ``columns`` records them."""
        return {column["name"]: column["type"] for column in json.loads(self.columns or "[]")}


def read_state(path: str | os.PathLike) -> list[TableState]:
    """Every row of the state table (empty when there is none yet). One row per gold table:
    read on the driver by delta-rs, in milliseconds where a Spark job takes seconds."""
    if not delta_table_exists(path):
        return []
    table = open_table(path)
    # A state table an older version wrote lacks the later columns (or holds nulls in them
    # for its older rows): their defaults stand.
    present = {field.name for field in table.schema().fields}
    names = [f.name for f in fields(TableState) if f.name in present]
    rows = table.to_pyarrow_table(columns=names).to_pylist()
    return [TableState(**{k: v for k, v in row.items() if v is not None or k not in LATER})
            for row in rows]  # fmt: skip


def write_state(
    path: str | os.PathLike,
    changefeed: str,
    states: list[TableState],
    version: int,
    generation: int,
) -> bool:
    """Upsert the changefeed's rows in one commit; False when (changefeed, generation,
    version) was already written (a rerun). A gold table never leaves the state table (a
    dropped one is marked), so an upsert by (changefeed, schema, table) replaces them all."""
    for state in states:
        if state.changefeed != changefeed:
            raise ValueError(f"state of {state.full_name} is not changefeed {changefeed}'s")
    rows = [asdict(state) for state in sorted(states, key=lambda s: (s.schema, s.table))]
    data = pa.Table.from_pylist(rows, schema=STATE_ARROW)
    result = merge_delta(
        data,
        path,
        ["changefeed", "schema", "table"],
        partition_by=["changefeed"],
        merge_schema=True,  # a table an older version wrote gains the later columns
        app_id=f"compact-state:{changefeed}#{generation}",
        version=version,
    )
    return result.committed
