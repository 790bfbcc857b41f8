"""Zero dates (0000-00-00, 2024-00-10) are NULL in gold, by design; the state counts them per
table, so a NULL that was a zero date can be told from one that was NULL upstream."""

from __future__ import annotations

import pytest
from ticdc_lake.gold import changes as gold_changes
from ticdc_lake.gold.compact import compact
from ticdc_lake.gold.state import read_state

from tests.gold.test_compact import _column, _Log

pytestmark = pytest.mark.spark

DATES = [("2024-01-02", "2024-01-02 03:04:05"), ("0000-00-00", "2024-00-10 00:00:00"),
         ("2024-05-00", None), (None, "0000-00-00 00:00:00")]  # fmt: skip
ZEROS = 4


def dated_log() -> _Log:
    log = _Log()
    log.ddl(
        100, "CREATE TABLE s.d (id int PRIMARY KEY, day date, at datetime, note varchar(9))", "d"
    )
    for number, (day, at) in enumerate(DATES, start=1):
        image = {
            "id": _column("c_int", number, key=True),
            "day": _column("c_date", day),
            "at": _column("c_datetime", at),
            "note": _column("c_varchar", "-00-00"),
        }
        log.row(110, "d", "insert", image)
    log.resolved(120)
    return log


@pytest.mark.parametrize("on_the_executors", [False, True], ids=["driver", "executors"])
def test_the_state_counts_the_zero_dates_gold_holds_as_null(
    spark, tmp_path, monkeypatch, on_the_executors
):
    if on_the_executors:  # the path of large loads: typed by Spark's tasks
        monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 0)
    config, layout = dated_log().landed(spark, tmp_path)
    result = compact(spark, config)
    (state,) = read_state(layout.gold_state)
    assert state.zero_dates == ZEROS  # the text column's "-00-00" is not a date
    assert result.tables["s.d"].zero_dates == ZEROS
    compact(spark, config, rebuild=True)
    (state,) = read_state(layout.gold_state)
    assert state.zero_dates == ZEROS  # counted anew, not added to the count before
