"""The synthetic TiDB workload: generate it, dispatch it to Kafka partitions, encode and write it.

`generate_workload` (logical events in commit order, expected table contents) is separate from
`route` (TiCDC's dispatch to topics and partitions, with at-least-once replays) and from
`write_generated` (encoding, export files, manifest, pipeline config), so tests can use each
step alone. Those hold the whole workload; `streaming.stream_generated` writes the same files
with bounded memory (what `ticdc-lake generate`, the demo and the benchmarks use).

Two profiles (`PROFILES`): ``realistic``, a production-like shop (shop.py), and ``ddl-heavy``,
the edge-case workload the tests are built on (the library's default).
"""

from ticdc_lake.sample.workload.expected import ExpectedLog, TableSnapshot
from ticdc_lake.sample.workload.generator import (
    PROFILES,
    Transaction,
    Workload,
    generate_workload,
    iter_workload,
    tso,
)
from ticdc_lake.sample.workload.tables import ColumnDef, TableDef, canonical_tables

__all__ = [
    "PROFILES",
    "ColumnDef",
    "ExpectedLog",
    "TableDef",
    "TableSnapshot",
    "Transaction",
    "Workload",
    "canonical_tables",
    "generate_workload",
    "iter_workload",
    "tso",
]
