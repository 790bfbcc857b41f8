"""A clean lake, built once: a small open-protocol workload through every stage. Each test
works on its own copy and breaks what it needs with plain deltalake writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.config import load_config
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated


@pytest.fixture(scope="session")
def clean_sample(spark, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("quality") / "clean"
    write_generated(
        directory,
        GenerateOptions(protocol="open-protocol", partitions=2, seed=3, transactions=30,
                        idle_partitions=0, replays=1),
    )  # fmt: skip
    result = run_stages(spark, load_config(directory / "pipeline.yaml"))
    assert not result.failed, result.to_dict()
    return directory


@pytest.fixture
def sample(clean_sample, tmp_path) -> Path:
    """A copy of the clean sample (config, exports, lake) to break."""
    copy = tmp_path / "sample"
    shutil.copytree(clean_sample, copy)
    return copy


def append(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` to the Delta table at ``path`` in its own schema."""
    table = DeltaTable(str(path))
    schema = pa.schema(table.schema().to_arrow())
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema), mode="append")


def rows(path: Path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()
