"""Fixtures the stage tests share."""

from __future__ import annotations

import pytest
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[int, list[KafkaRecord]]:
    """A small TiCDC workload's Kafka records per partition (one topic, 3 partitions)."""
    out = tmp_path_factory.mktemp("workload")
    result = write_generated(
        out, GenerateOptions(protocol="open-protocol", transactions=40, partitions=3, seed=7)
    )
    streams = {partition: stream.records for (_, partition), stream in result.encoded.items()}
    assert all(len(records) >= 15 for records in streams.values()), "workload too small"
    return streams
