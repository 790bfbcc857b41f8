"""What every stage's checks share in one job: the session, the config, one GE validator."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
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


def candidates(frame: DataFrame, unique: Sequence[str], predicates: Sequence[str]) -> DataFrame:
    """The rows of ``frame`` that can fail a check: every copy of a ``unique`` key that repeats
    (nulls alike, as GE's uniqueness counts them; ``copies`` says how many), and each row that
    meets one of the row checks' SQL ``predicates``, the same strings their queries use.

    GE then validates only these rows and finds exactly the duplicates and rows it would find
    in the whole frame: its own ExpectCompoundColumnsToBeUnique takes several passes over its
    frame, 2.9-3.0 s over 430k cached gold keys of a 1M realistic run."""
    copies = F.count(F.lit(1)).over(Window.partitionBy(*unique))
    failing = " OR ".join(["copies > 1", *(f"({predicate})" for predicate in predicates)])
    return frame.withColumn("copies", copies).where(failing)
