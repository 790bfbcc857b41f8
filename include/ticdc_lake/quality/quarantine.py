"""Silver rows a data-quality check quarantined (layout.quality_quarantine): the row event's
columns, the check's name, the run. Compaction leaves them out of gold."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ticdc_lake.delta import delta_table_exists, open_table
from ticdc_lake.lake.layout import LakeLayout

COORDINATES = ["topic", "partition", "offset", "index"]


def quarantined_table(layout: LakeLayout) -> pa.Table | None:
    """Kafka coordinates of the quarantined row events, or None when there are none."""
    if not delta_table_exists(layout.quality_quarantine):
        return None
    table = open_table(layout.quality_quarantine).to_pyarrow_table(columns=COORDINATES)
    return table if table.num_rows else None


def quarantined_coordinates(spark: SparkSession, layout: LakeLayout) -> DataFrame | None:
    """``quarantined_table`` as a Spark DataFrame."""
    table = quarantined_table(layout)
    return None if table is None else spark.createDataFrame(table)
