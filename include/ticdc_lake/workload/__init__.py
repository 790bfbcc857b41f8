"""The synthetic TiDB workload: generate it, dispatch it to Kafka partitions, encode and write it.

`generate_workload` (logical events in commit order, expected table contents) is separate from
`route` (TiCDC's dispatch to topics and partitions, with at-least-once replays) and from
`write_generated` (encoding, export files, manifest, pipeline config), so tests can use each
step alone.
"""

from ticdc_lake.workload.expected import ExpectedLog, TableSnapshot
from ticdc_lake.workload.generator import Transaction, Workload, generate_workload, tso
from ticdc_lake.workload.tables import ColumnDef, TableDef, canonical_tables

__all__ = [
    "ColumnDef",
    "ExpectedLog",
    "TableDef",
    "TableSnapshot",
    "Transaction",
    "Workload",
    "canonical_tables",
    "generate_workload",
    "tso",
]
