"""Every table the pipeline writes reads the same in both Delta engines: delta-rs (the CLI, the
report, the Airflow page) and delta-spark (Spark SQL on a user's cluster), after schema
evolution, TRUNCATEs, a rebuild of gold and a VACUUM; and none uses a table feature delta-rs
cannot read (deletion vectors, column mapping)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from ticdc_lake.gold.compact import compact

from tests.e2e import lakes

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    built = lakes.build_lake(spark, tmp_path_factory.mktemp("engines"), lakes.CASES[0])
    compact(spark, built.config, rebuild=True)  # gold written again under a new generation
    return built


def tables(lake) -> list[str]:
    return sorted(str(log.parent) for log in lake.layout.root.rglob("_delta_log"))


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist())


def assert_engines_agree(spark, path: str) -> None:
    by_rust = DeltaTable(path).to_pyarrow_table()
    by_spark = spark.read.format("delta").load(path).toArrow()
    assert by_spark.column_names == by_rust.column_names, path
    # Spark gives TIMESTAMP columns its session's zone: the same instants.
    assert _rows(by_spark.cast(by_rust.schema)) == _rows(by_rust), path


def test_both_engines_read_every_table_alike_and_after_a_vacuum(spark, lake):
    paths = tables(lake)
    assert any("/gold/" in p for p in paths) and any("/bronze/" in p for p in paths)
    for path in paths:
        protocol = DeltaTable(path).protocol()
        features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
        assert not features & {"deletionVectors", "columnMapping"}, (path, features)
        assert_engines_agree(spark, path)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        for path in paths:
            spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    for path in paths:
        assert_engines_agree(spark, path)
    lakes.assert_lake_gold_is_expected(lake, lake.watermark_of(lake.second))
