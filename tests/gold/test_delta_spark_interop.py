"""Gold is an ordinary Delta table to Delta on Spark: a user's OPTIMIZE, DESCRIBE HISTORY,
time travel and VACUUM through Spark SQL work on it, and the pipeline's next compaction, its
checks and ``query --as-of`` carry on after them with the rows upstream held."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from ticdc_lake.gold.as_of import AsOfError, read_as_of, version_as_of
from ticdc_lake.gold.compact import compact
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.quality.run import check_stage

from tests.gold.test_as_of import by_key, row
from tests.gold.test_compact import _Log

pytestmark = pytest.mark.spark


def _log() -> _Log:
    log = _Log()
    log.ddl(100, "CREATE TABLE s.t (id int PRIMARY KEY, v int)", "t")
    for key in range(1, 41):
        log.row(100 + key, "t", "insert", row(key, key * 10))
    log.resolved(150)
    log.row(210, "t", "update", row(2, 21), row(2, 20))
    log.row(220, "t", "insert", row(41, 410))
    log.row(230, "t", "delete", None, row(1, 10))
    log.resolved(250)
    return log


def _sql_rows(spark, query: str) -> list[dict]:
    return by_key([r.asDict() for r in spark.sql(query).collect()])


def _compacted_in_several_runs(spark, config, until: list[int]) -> None:
    """Several compactions, each adding files, so that OPTIMIZE has files to bin-pack."""
    for ts in until:
        compact(spark, config, until_ts=ts)


def test_optimize_history_time_travel_and_vacuum_through_spark_sql(spark, tmp_path):
    config, layout = _log().landed(spark, tmp_path)
    _compacted_in_several_runs(spark, config, [110, 120, 130, 150])
    path = layout.gold("s", "t")
    table = f"delta.`{path}`"
    before = _sql_rows(spark, f"SELECT * FROM {table}")
    assert [r["id"] for r in before] == list(range(1, 41))

    optimized = spark.sql(f"OPTIMIZE {table}").collect()[0].asDict()
    assert optimized["metrics"]["numFilesRemoved"] >= 2
    assert _sql_rows(spark, f"SELECT * FROM {table}") == before
    operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {table}").collect()]
    assert operations[0] == "OPTIMIZE"

    compact(spark, config)  # on top of the user's OPTIMIZE commit
    after = {r["id"]: r for r in _sql_rows(spark, f"SELECT * FROM {table}")}
    assert 1 not in after and after[2]["v"] == 21 and after[41]["v"] == 410
    assert after[41]["_commit_ts"] == 220 and len(after) == 40
    rows = by_key(DeltaTable(str(path)).to_pyarrow_table().to_pylist())
    assert rows == by_key(after.values())  # delta-rs reads what Delta on Spark reads

    as_of = version_as_of(layout, "s", "t", 200)
    assert by_key(read_as_of(as_of).to_pylist()) == before
    assert _sql_rows(spark, as_of.spark_sql) == before
    assert not check_stage(spark, config, "gold").failed

    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM {table} RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert _sql_rows(spark, f"SELECT * FROM {table}") == by_key(after.values())
    with pytest.raises(AsOfError, match="older than the retained history"):
        read_as_of(version_as_of(layout, "s", "t", 200))
    assert version_as_of(layout, "s", "t", 250).watermark == 250


def test_a_gold_table_given_deletion_vectors_is_refused_naming_the_feature(spark, tmp_path):
    """Deletion vectors change what a table's Parquet files mean: until compaction runs on Delta on
    Spark, that table fails with the feature named, and the other tables are compacted."""
    log = _log()
    log.ddl(105, "CREATE TABLE s.u (id int PRIMARY KEY, v int)", "u")
    log.row(240, "u", "insert", row(7, 70), schema="s")
    config, layout = log.landed(spark, tmp_path)
    compact(spark, config, until_ts=150)
    table = f"delta.`{layout.gold('s', 't')}`"
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.sql(f"DELETE FROM {table} WHERE id = 5")
    with pytest.raises(CompactError, match=r"s\.t: UnsupportedTableError: .* deletion vectors"):
        compact(spark, config)
    assert [
        r["id"] for r in _sql_rows(spark, f"SELECT * FROM delta.`{layout.gold('s', 'u')}`")
    ] == [7]
