"""Bronze's ``record_hash`` computed in Python by land's pass equals Spark's ``xxhash64`` of
the same record (``land_batch.with_record_hash``): later batches tell a duplicate from a
conflict by comparing the two."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType
from ticdc_lake.bronze.export_source import HEADERS_TYPE
from ticdc_lake.bronze.land_batch import with_record_hash
from ticdc_lake.bronze.record_hash import record_hashes

SPARK_ROWS = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),
    ]
)
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

EDGES = [
    (None, b"v", []),
    (b"v", None, []),  # not (None, b"v"): the null flags keep them apart
    (None, None, []),
    (b"", b"", []),
    (b"k", b"v", [{"key": "h", "value": b"\xff\x00"}, {"key": "empty", "value": None}]),
    (b"k", b"v", [None, {"key": None, "value": b"x"}, {"key": "é€😀", "value": b""}]),
    (b"\x00" * 1000, b"z" * 70_000, [{"key": "", "value": None}]),
]


def random_rows(count: int) -> list[tuple]:
    generator = random.Random(3)

    def some_bytes(longest: int) -> bytes | None:
        return (
            None if generator.random() < 0.1 else generator.randbytes(generator.randint(0, longest))
        )

    def headers() -> list:
        if generator.random() < 0.7:
            return []
        return [
            None
            if generator.random() < 0.1
            else {"key": generator.choice([None, "", "id", "ключ"]), "value": some_bytes(20)}
            for _ in range(generator.randint(0, 3))
        ]

    return [(some_bytes(40), some_bytes(3000), headers()) for _ in range(count)]


@pytest.mark.spark
def test_python_hashes_are_spark_s(spark):
    rows = EDGES + random_rows(400)
    frame = spark.createDataFrame(rows, SPARK_ROWS)
    # Spark coalesces null headers to [] before hashing, as the pass does.
    spark_hashes = [row.record_hash for row in with_record_hash(frame).collect()]
    keys, values, headers = (list(column) for column in zip(*rows, strict=True))
    arrays = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    ours = record_hashes(*arrays, pa.array(headers, ARROW_HEADERS)).to_pylist()
    assert ours == spark_hashes
    # Arrays that are slices of larger ones (an Arrow batch cut by the reader), and large ones.
    sliced = [array.slice(5) for array in (*arrays, pa.array(headers, ARROW_HEADERS))]
    assert record_hashes(*sliced).to_pylist() == spark_hashes[5:]
    large = [array.cast(pa.large_binary()) for array in arrays]
    assert record_hashes(*large, pa.array(headers, ARROW_HEADERS)).to_pylist() == spark_hashes


def test_null_headers_hash_as_none():
    keys, values = pa.array([b"k", None]), pa.array([b"v", b"w"])
    none = pa.array([None, None], ARROW_HEADERS)
    empty = pa.array([[], []], ARROW_HEADERS)
    assert record_hashes(keys, values, none) == record_hashes(keys, values, empty)


@pytest.mark.spark
def test_a_header_key_that_is_not_utf8_hashes_its_bytes_as_spark_does(spark):
    """A Parquet string holds whatever bytes it was given: Spark hashes them as they are."""
    key = pa.array([b"\xff\xfe", b"ok"]).view(pa.string())
    pairs = pa.StructArray.from_arrays([key, pa.array([b"x", None])], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), pairs)
    frame = spark.createDataFrame(
        [(b"k", b"v", b"\xff\xfe", b"ok")], "key binary, value binary, a binary, b binary"
    )
    as_strings = [F.struct(F.col(n).cast("string").alias("key"), value.alias("value")) for
                  n, value in (("a", F.lit(b"x")), ("b", F.lit(None).cast("binary")))]  # fmt: skip
    frame = frame.select("key", "value", F.array(*as_strings).alias("headers"))
    (expected,) = [row.record_hash for row in with_record_hash(frame).collect()]
    ours = record_hashes(pa.array([b"k"]), pa.array([b"v"]), headers)
    assert ours.to_pylist() == [expected]
