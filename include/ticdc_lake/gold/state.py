"""The gold state table (layout.gold_state): per gold table, what it reflects.

One row per gold table, partitioned by changefeed; each compaction of a changefeed replaces its
partition in one commit (app id ``compact-state:<changefeed>#<generation>``), after the gold
tables:

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
| applied_batch | bronze batches up to this one were read (for changes without a commit TS)    |
| rows          | rows in the gold table                                                        |
| columns       | JSON list of {name, type, mysql_type}: the gold columns and their origin     |
| handle_key    | the key gold rows are unique by                                              |
| dropped       | the upstream table was dropped (or renamed away); gold is empty               |
| reason        | why the table is not consistent, if it is not                                 |
| generation    | bumped when the changefeed's gold is rebuilt (mode change, ``rebuild=True``) |
| gold_version  | the gold table's Delta version after the compaction                          |
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from ticdc_lake.delta import delta_table_exists, read_delta, write_delta

WATERMARK = "watermark"
CUTOFF = "cutoff"
INCONSISTENT = "inconsistent"
MODES = (WATERMARK, CUTOFF, INCONSISTENT)

STATE_SCHEMA = T.StructType(
    [
        T.StructField("changefeed", T.StringType()),
        T.StructField("schema", T.StringType()),
        T.StructField("table", T.StringType()),
        T.StructField("path", T.StringType()),
        T.StructField("mode", T.StringType()),
        T.StructField("watermark", T.LongType()),
        T.StructField("applied_ts", T.LongType()),
        T.StructField("applied_batch", T.LongType()),
        T.StructField("rows", T.LongType()),
        T.StructField("columns", T.StringType()),
        T.StructField("handle_key", T.ArrayType(T.StringType())),
        T.StructField("dropped", T.BooleanType()),
        T.StructField("reason", T.StringType()),
        T.StructField("generation", T.IntegerType()),
        T.StructField("gold_version", T.LongType()),
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

    @property
    def full_name(self) -> str:
        return f"{self.schema}.{self.table}"


def read_state(spark: SparkSession, path: str | os.PathLike) -> list[TableState]:
    """Every row of the state table (empty when there is none yet)."""
    if not delta_table_exists(path):
        return []
    names = [f.name for f in fields(TableState)]
    rows = read_delta(spark, path).collect()
    return [TableState(**{name: row[name] for name in names}) for row in rows]


def write_state(
    spark: SparkSession,
    path: str | os.PathLike,
    changefeed: str,
    states: list[TableState],
    version: int,
    generation: int,
) -> bool:
    """Replace the changefeed's rows in one commit; False when (changefeed, generation,
    version) was already written (a rerun)."""
    rows = [asdict(state) for state in sorted(states, key=lambda s: (s.schema, s.table))]
    frame = spark.createDataFrame(rows, STATE_SCHEMA)
    result = write_delta(
        frame,
        path,
        mode="overwrite",
        partition_by=["changefeed"],
        replace_where={"changefeed": changefeed},
        app_id=f"compact-state:{changefeed}#{generation}",
        version=version,
    )
    return result.committed
