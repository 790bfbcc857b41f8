"""The ddl-heavy profile: small churned tables of every type's extremes, a DDL per ~200
transactions."""

from __future__ import annotations

from ticdc_lake.sample.workload import generate_workload, generator


def _columns_added(workload) -> int:
    return sum("ADD COLUMN" in event.query for event in workload.ddl_events)


def test_random_ddls_stop_widening_a_table_at_the_widest(monkeypatch):
    free = generate_workload(seed=1, transactions=4000)
    monkeypatch.setattr(generator, "WIDEST_TABLE", 0)
    capped = generate_workload(seed=1, transactions=4000)
    # Past the width every random ADD COLUMN becomes a DROP; the profile's two planned ones stay.
    assert _columns_added(free) > 2
    assert _columns_added(capped) == 2
