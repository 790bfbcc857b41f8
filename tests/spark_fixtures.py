"""The one SparkSession of a test run (via ``pytest_plugins = ["tests.spark_fixtures"]``)."""

from __future__ import annotations

import pytest
from ticdc_lake.runtime.spark import build_session

TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # Tests create many tiny DataFrames: broadcast joins and AQE re-planning only add latency.
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark():
    session = build_session("ticdc-lake-tests", master="local[2]", conf=TEST_CONF)
    yield session
    session.stop()
