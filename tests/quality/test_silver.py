"""The silver row checks' SQL."""

from __future__ import annotations

import random

from pyspark.sql import functions as F
from ticdc_lake.quality.silver import UNROLLED_KEY_COLUMNS, key_not_in_images

IMAGE = "array<struct<name: string>>"
# The check as it reads: some key column is named in neither image (Spark's lambda, row by row).
REFERENCE = (
    "NOT forall(handle_key, k -> coalesce(array_contains(columns.name, k), false) "
    "OR coalesce(array_contains(old_columns.name, k), false))"
)


def _image(pick: random.Random):
    if pick.random() < 0.1:
        return None
    return [
        {"name": pick.choice(["a", "b", "c", "d", "e", "f", None])}
        for _ in range(pick.randrange(6))
    ]


def _key(pick: random.Random):
    if pick.random() < 0.05:
        return None
    size = pick.randrange(UNROLLED_KEY_COLUMNS + 3)  # unrolled sizes, and longer keys
    return [pick.choice(["a", "b", "c", "d", "e", "f", None]) for _ in range(size)]


def test_a_missing_key_column_is_found_as_the_row_by_row_lambda_finds_it(spark):
    pick = random.Random(11)
    rows = [(i, _key(pick), _image(pick), _image(pick)) for i in range(600)]
    rows += [
        (600, ["a", "b"], [{"name": "a"}], [{"name": "b"}]),
        (601, ["a"], None, [{"name": "a"}]),
    ]
    frame = spark.createDataFrame(
        rows, f"id int, handle_key array<string>, columns {IMAGE}, old_columns {IMAGE}"
    )

    def failing(sql: str):
        return F.coalesce(F.expr(sql), F.lit(False))

    found = frame.select(
        "id", failing(key_not_in_images()).alias("fast"), failing(REFERENCE).alias("reference")
    ).collect()

    assert [row.id for row in found if row.fast != row.reference] == []
    assert {row.id: row.fast for row in found if row.id >= 600} == {600: False, 601: False}
    flagged = sum(row.fast for row in found)
    assert 0 < flagged < len(found)  # the draws hold failing rows and passing ones
