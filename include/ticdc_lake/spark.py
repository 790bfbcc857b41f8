"""Building the SparkSession every stage runs on.

The session is created once by a job's ``main()`` (or a test fixture) and passed in; nothing in
the library creates or looks up a global session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark import SparkConf
from pyspark.sql import SparkSession

# Settings for a laptop or a 2-core CI runner; a cluster's spark-submit overrides any of them.
DEFAULT_CONF: dict[str, str] = {
    # Timestamps are instants: Spark must neither shift them by the machine's zone when it
    # converts to Arrow nor when it parses or prints them.
    "spark.sql.session.timeZone": "UTC",
    # The default 200 shuffle partitions means 200 tiny tasks per shuffle on a small machine.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python data sources and mapInArrow start Python workers: reuse them across tasks.
    "spark.python.worker.reuse": "true",
    # Parquet written by pyarrow/delta-rs carries no Spark rebase metadata: dates and
    # timestamps before 1582 are proleptic Gregorian already and must be read as they are.
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.ui.showConsoleProgress": "false",
}


def build_session(
    app_name: str = "ticdc-lake",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for the pipeline, with the Delta data source registered.

    ``master`` defaults to ``local[*]`` unless spark-submit already chose one. Workers run this
    interpreter (``PYSPARK_PYTHON``): Python data sources and Arrow UDFs import pyarrow and
    this package on the workers, which a system Python lacks.
    """
    # Both the environment variable and the conf: the variable is read by the launcher of
    # local-mode workers, the conf by executors on a cluster.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")
    settings = {**DEFAULT_CONF, "spark.pyspark.python": os.environ["PYSPARK_PYTHON"]}
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")

    # Imported here: the data source module imports deltalake, which a session used only for
    # reading files does not otherwise need at import time.
    from ticdc_lake.delta.source import register_delta_source

    register_delta_source(session)
    return session
