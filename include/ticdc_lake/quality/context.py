"""What every stage's checks share in one job: the session, the config, one GE validator."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

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
