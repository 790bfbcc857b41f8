"""Which bronze files a batch whose offsets overlap bronze's reads for their copies."""

from __future__ import annotations

import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from ticdc_lake.bronze.land_batch import _bronze_copies
from ticdc_lake.bronze.land_tables import LandPlan, LandTables
from ticdc_lake.lake.layout import LakeLayout


def _landed(path, batch: int, offsets: range) -> set[str]:
    """Append bronze-like rows of one batch as a file of its own; the file's name."""
    before = set(DeltaTable(str(path)).file_uris()) if path.exists() else set()
    rows = pa.table(
        {
            "topic": ["t"] * len(offsets),
            "partition": pa.array([0] * len(offsets), pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
            "batch_id": pa.array([batch] * len(offsets), pa.int64()),
            "source_file": [f"export-{batch}"] * len(offsets),
            "record_hash": [f"{batch}-{offset}" for offset in offsets],
        }
    )
    write_deltalake(str(path), rows, mode="append")
    return {os.path.basename(uri) for uri in set(DeltaTable(str(path)).file_uris()) - before}


def test_copies_are_read_only_from_files_whose_offsets_meet_the_overlap(spark, tmp_path):
    tables = LandTables.of(LakeLayout(tmp_path / "lake"))
    old = _landed(tables.bronze, 1, range(0, 100))
    recent = _landed(tables.bronze, 2, range(100, 200))
    plan = LandPlan(
        batch_id=3,
        landed_at_us=0,
        files=(),
        versions={"bronze": DeltaTable(str(tables.bronze)).version()},
    )

    copies = _bronze_copies(spark, tables, plan, {("t", 0): (150, 210)})

    assert {os.path.basename(uri) for uri in copies.inputFiles()} == recent != old
    assert sorted(row.offset for row in copies.collect()) == list(range(150, 200))
    assert {row.kept_batch_id for row in copies.collect()} == {2}
