"""What every stage's checks share in one job: the session, the config, one GE validator."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ticdc_lake.config import PipelineConfig
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.settings import QualitySettings
from ticdc_lake.quality.validator import Validator


@dataclass
class QualityContext:
    spark: SparkSession
    config: PipelineConfig
    settings: QualitySettings
    validator: Validator
    now: float  # Unix seconds (lakeview.clock)

    @property
    def layout(self) -> LakeLayout:
        return LakeLayout(self.config.lake)


@contextmanager
def computed_once(frame: DataFrame) -> Iterator[DataFrame]:
    """``frame`` cached and computed before the checks query it, then released: GE's queries
    of a cache not yet built each compute the frame again (measured: three row checks on 1M
    silver rows read the images three times)."""
    frame = frame.cache()
    try:
        frame.count()
        yield frame
    finally:
        frame.unpersist()


def copies(columns: Sequence[str]) -> Column:
    """How many rows of the frame share the row's values of ``columns`` (nulls alike, as GE's
    uniqueness counts them).

    A check of uniqueness is then validated only on the rows that can fail it (``copies > 1``,
    with every copy of a repeated key, so GE finds exactly the duplicates it would find in the
    whole frame): GE's own ExpectCompoundColumnsToBeUnique takes several passes over its
    frame, 2.9-3.0 s over 430k cached gold keys of a 1M realistic run."""
    return F.count(F.lit(1)).over(Window.partitionBy(*columns))
