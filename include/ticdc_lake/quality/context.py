"""What every stage's checks share in one job: the session, the config, one GE validator."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

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
