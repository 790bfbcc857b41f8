"""Column names from upstream in Spark: a backtick, a dot, a space, a keyword, a non-ASCII
letter, each referenced, transformed and passed through mapInArrow by its exact name."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from ticdc_lake.gold import catalog
from ticdc_lake.gold.tables import alter_column, delete_rows, drop_columns, reshaped
from ticdc_lake.runtime.spark_columns import map_in_arrow, named_column, quoted

pytestmark = pytest.mark.spark

NAMES = ["a`b", "a.b", "a b", "é", "select", "``", "plain"]


@pytest.fixture
def frame(spark):
    schema = ", ".join(f"{quoted(name)} int" for name in NAMES)
    return spark.createDataFrame([tuple(range(len(NAMES))), tuple(range(10, 17))], schema)


def test_every_name_is_one_column(frame):
    assert frame.columns == NAMES
    rows = frame.select(*[named_column(n) for n in reversed(NAMES)]).collect()
    assert [list(r) for r in rows] == [list(range(6, -1, -1)), list(range(16, 9, -1))]


def test_map_in_arrow_sees_the_names_and_returns_its_schema(frame):
    seen = []

    def double(batches):
        for batch in batches:
            seen.append(batch.schema.names)
            yield pa.RecordBatch.from_arrays(
                [pc.multiply(c, pa.scalar(2, c.type)) for c in batch.columns],
                names=batch.schema.names,
            )

    out = map_in_arrow(frame, double, frame.schema)
    assert out.columns == NAMES
    assert [list(r) for r in out.collect()] == [
        [2 * v for v in range(7)],
        [2 * v for v in range(10, 17)],
    ]


def test_the_gold_transforms_take_any_column_name(frame):
    altered = alter_column("a`b", "x`y", pa.string())(frame)
    assert altered.columns[0] == "x`y" and altered.first()["x`y"] == "0"
    assert drop_columns(("a.b", "é"))(frame).columns == ["a`b", "a b", "select", "``", "plain"]
    schema = pa.schema([("select", pa.int64()), ("new", pa.string())])
    shaped = reshaped(schema, sources={"select": "a.b"})(frame)
    assert [list(r) for r in shaped.collect()] == [[1, None], [11, None]]
    rows = catalog.PartitionRows("list", "a b", values=(2,))
    assert [r["a b"] for r in delete_rows(rows)(frame).collect()] == [12]
