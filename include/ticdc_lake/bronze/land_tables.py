"""Land's tables and the plan of a batch: what a land run reads and commits to."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ticdc_lake.bronze.export_source import HEADERS_TYPE, ExportFile
from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.storage import S3Settings, is_object_uri

APP_ID = "land"  # the Delta app transaction of every land commit; its version is the batch id

BRONZE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestamp_type", IntegerType()),  # null: the export did not say
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),  # [] when the record has none
        StructField("record_hash", LongType()),  # xxhash64 of key, value and headers
        StructField("source_file", StringType()),
        StructField("batch_id", LongType()),
        StructField("landed_at", TimestampType()),
    ]
)
BRONZE_PARTITION_BY = ("topic",)

# The small tables land writes from the driver (Arrow → delta-rs), one row per file or run.
LANDED_FILES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modification_time", pa.timestamp("us", tz="UTC")),
        ("layout", pa.string()),  # parquet | jsonl (also kcat) | avro | unknown
        ("file_compression", pa.string()),  # none | gz | zstd
        ("batch_id", pa.int64()),
        ("records_read", pa.int64()),  # = added + duplicates + conflicts
        ("records_added", pa.int64()),
        ("duplicates", pa.int64()),
        ("conflicts", pa.int64()),
        ("errors", pa.int64()),  # lines/rows (or the whole file) not readable
        ("landed_at", pa.timestamp("us", tz="UTC")),
        ("etag", pa.string()),  # an s3:// object's tag (a new one on every upload); null for files
    ]
)

EXPORT_ERRORS_SCHEMA = StructType(
    [
        StructField("batch_id", LongType()),
        StructField("source_file", StringType()),
        StructField("line", LongType()),  # 1-based line (JSON Lines) or row; null: whole file
        StructField("reason", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("raw", BinaryType()),
        StructField("landed_at", TimestampType()),
    ]
)

OFFSET_CONFLICTS_SCHEMA = StructType(
    [
        StructField("batch_id", LongType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("source_file", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),
        StructField("record_hash", LongType()),
        StructField("kept_batch_id", LongType()),  # where the copy bronze holds came from
        StructField("kept_source_file", StringType()),
        StructField("kept_record_hash", LongType()),
        StructField("landed_at", TimestampType()),
    ]
)

OFFSET_RANGES_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("from_offset", pa.int64()),
        ("to_offset", pa.int64()),
        ("size", pa.int64()),
    ]
)

OFFSET_GAPS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("from_offset", pa.int64()),  # first missing offset
        ("to_offset", pa.int64()),  # last missing offset (inclusive)
        ("size", pa.int64()),
        ("batch_id", pa.int64()),  # the batch that first saw this gap
    ]
)


class LandError(TicdcLakeError):
    """The landing area or the bronze tables are not in a state land can work from."""


@dataclass(frozen=True)
class LandTables:
    """Land's tables, from the layout."""

    bronze: Path
    landed_files: Path
    export_errors: Path
    offset_conflicts: Path
    offset_ranges: Path
    offset_gaps: Path
    plan: Path  # the pending batch's plan (not a table)

    @classmethod
    def of(cls, layout: LakeLayout) -> LandTables:
        return cls(
            bronze=layout.bronze,
            landed_files=layout.landed_files,
            export_errors=layout.export_errors,
            offset_conflicts=layout.offset_conflicts,
            offset_ranges=layout.offset_ranges,
            offset_gaps=layout.offset_gaps,
            plan=layout.land_plan,
        )

    def committed(self) -> list[Path]:
        """The tables a batch commits to, in commit order (landed_files last: batch done)."""
        return [
            self.bronze,
            self.export_errors,
            self.offset_conflicts,
            self.offset_ranges,
            self.offset_gaps,
            self.landed_files,
        ]


@dataclass(frozen=True)
class LandPlan:
    """A batch as decided before anything is written; a retry lands exactly this."""

    batch_id: int
    landed_at_us: int  # one landing time for the whole batch, the same on a retry
    files: tuple[ExportFile, ...]
    versions: dict[str, int | None]  # table versions the batch is computed against
    # offset_ranges is behind bronze (a killed run's plan was lost): derive the runs from
    # bronze itself, or records of that run would look new and land twice.
    rebuild_ranges: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        # How a file's store is reached comes from the config when the plan runs, not from here.
        data["files"] = [asdict(f) | {"s3": None} for f in self.files]
        return json.dumps(data, indent=1)

    def reaching(self, s3: S3Settings | None) -> LandPlan:
        """The plan with its s3:// files reached through ``s3`` (the config's storage.s3), its
        credentials read here: the tasks' processes may lack the variables. A plan of local
        files only is returned as it is, reading nothing."""
        if not any(is_object_uri(f.path) for f in self.files):
            return self
        store = s3.resolved() if s3 else None
        files = tuple(
            dataclasses.replace(f, s3=store) if is_object_uri(f.path) else f for f in self.files
        )
        return dataclasses.replace(self, files=files)

    @classmethod
    def from_json(cls, text: str) -> LandPlan:
        data = json.loads(text)
        return cls(
            batch_id=data["batch_id"],
            landed_at_us=data["landed_at_us"],
            files=tuple(ExportFile(**f) for f in data["files"]),
            versions=data["versions"],
            rebuild_ranges=data.get("rebuild_ranges", False),
        )

    @property
    def landed_at(self) -> dt.datetime:
        return from_micros(self.landed_at_us)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def to_micros(stamp: dt.datetime) -> int:
    # Integer arithmetic: a float round trip can be a microsecond off, making a file "changed".
    return (stamp.replace(tzinfo=stamp.tzinfo or dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)


def from_micros(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)
