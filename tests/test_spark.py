"""The session helpers: settings scoped to the jobs of one block."""

from __future__ import annotations

import pytest
from ticdc_lake.spark import job_settings

SPLITS = "spark.sql.files.minPartitionNum"
SPLIT_BYTES = "spark.sql.files.maxPartitionBytes"


def test_job_settings_hold_inside_the_block_and_are_as_before_after_it(spark):
    spark.conf.set(SPLIT_BYTES, "64m")
    try:
        with job_settings(spark, {SPLITS: "8", SPLIT_BYTES: "16m"}):
            assert (spark.conf.get(SPLITS), spark.conf.get(SPLIT_BYTES)) == ("8", "16m")
        assert spark.conf.get(SPLITS, None) is None  # not set before: not set after
        assert spark.conf.get(SPLIT_BYTES) == "64m"

        with pytest.raises(RuntimeError), job_settings(spark, {SPLITS: "3"}):
            raise RuntimeError("a failing job")
        assert spark.conf.get(SPLITS, None) is None
    finally:
        spark.conf.unset(SPLIT_BYTES)
