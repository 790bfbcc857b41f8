"""Which bronze files a run's bronze check reads."""

from __future__ import annotations

import os

from deltalake import DeltaTable
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.bronze import batch_records
from ticdc_lake.quality.context import QualityContext

from tests.quality.conftest import append, rows


def _files(path) -> set[str]:
    return {os.path.basename(uri) for uri in DeltaTable(str(path)).file_uris()}


def test_a_batch_is_checked_from_its_own_files_and_those_its_offsets_may_meet(spark, sample):
    config = load_config(sample / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    ctx = QualityContext(spark, config, config.quality, None, 0.0)
    landed = rows(layout.bronze)
    first = _files(layout.bronze)
    later = max(row["offset"] for row in landed) + 1_000_000
    append(layout.bronze, [landed[0] | {"offset": later, "batch_id": 2}])
    second = _files(layout.bronze) - first
    copy = landed[1] | {"batch_id": 3}  # an offset batch 1 holds, landed again
    append(layout.bronze, [copy])
    third = _files(layout.bronze) - first - second

    # Batch 2's offsets are beyond every earlier file's: bronze's history is not read.
    records = batch_records(ctx, [2])
    assert {os.path.basename(uri) for uri in records.inputFiles()} == second
    assert [row.seen_before for row in records.collect()] == [False]

    # Batch 3's offset is within batch 1's files: they are read, and the copy is seen.
    records = batch_records(ctx, [3])
    read = {os.path.basename(uri) for uri in records.inputFiles()}
    assert third <= read and read & first and not read & second
    assert [row.seen_before for row in records.collect()] == [True]
