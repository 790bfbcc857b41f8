"""The realistic profile: a production-like changefeed over a shop's tables (issue 11)."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from decimal import Decimal
from itertools import groupby

import pytest
from ticdc_lake.sample.cases import COLUMN_TYPES
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.dispatch import route
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.generator import START_PHYSICAL_MS, default_replays
from ticdc_lake.sample.workload.losses import canonical
from ticdc_lake.sample.workload.shop import (
    FIRST_NAMES,
    LAST_NAMES,
    ORDER_STATUSES,
    PAYMENT_METHODS,
    TIERS,
    shop_tables,
)
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DELETE, INSERT, UPDATE, RowEvent

TRANSACTIONS = 6000


@pytest.fixture(scope="module")
def workload():
    return generate_workload(seed=3, transactions=TRANSACTIONS, profile="realistic")


def values(event: RowEvent) -> dict:
    image = event.old_columns if event.op == DELETE else event.columns
    return {name: column.value for name, column in image.items()}


def test_the_same_seed_gives_the_same_workload(workload):
    again = generate_workload(seed=3, transactions=TRANSACTIONS, profile="realistic")
    assert [canonical(e) for e in again.events] == [canonical(e) for e in workload.events]
    assert again.expected.points == workload.expected.points
    other = generate_workload(seed=4, transactions=TRANSACTIONS, profile="realistic")
    assert [canonical(e) for e in other.events] != [canonical(e) for e in workload.events]


def test_unknown_profiles_are_refused():
    with pytest.raises(ValueError, match="profile must be one of realistic, ddl-heavy"):
        generate_workload(transactions=5, profile="chaos")


def test_tenants_hold_the_shop_each_in_a_schema_of_its_own():
    tenants = generate_workload(seed=3, transactions=600, profile="realistic", tenants=3)
    names = {table.full_name for table in tenants.tables}
    shop = {table.name for table in shop_tables()}
    assert names == {f"{schema}.{name}" for schema in ("shop", "shop_2", "shop_3") for name in shop}
    ids = [i for table in tenants.tables for i in (table.table_id, *table.partition_ids)]
    assert len(ids) == len(set(ids))  # TiDB's table and partition ids are unique
    changed = {event.schema for event in tenants.row_events}
    assert changed == {"shop", "shop_2", "shop_3"}
    # A tenant's customers are updated as the first tenant's are: never their e-mail.
    updates = [e for e in tenants.row_events if e.op == UPDATE and e.table == "customers"]
    assert {event.schema for event in updates} == changed
    for event in updates:
        assert event.old_columns["email"] == event.columns["email"], event.schema
    with pytest.raises(ValueError, match="more than 1 only in the realistic profile"):
        generate_workload(transactions=5, profile="ddl-heavy", tenants=2)
    with pytest.raises(ValueError, match="tenants must be from 1 to 1000"):
        generate_workload(transactions=5, profile="realistic", tenants=1001)


def test_tables_cover_every_column_type_and_every_kind_of_handle():
    tables = {table.name: table for table in shop_tables()}
    covered = {(c.type_code, c.column_type.flags) for t in tables.values() for c in t.columns}
    assert {(t.type_code, t.flags) for t in COLUMN_TYPES} <= covered
    names = {c.column_type.name for t in tables.values() for c in t.columns}
    assert {
        t.name for t in COLUMN_TYPES if t.type_code not in (mysql.TYPE_ENUM, mysql.TYPE_SET)
    } <= names
    assert len(tables["orders"].partition_ids) == 4
    sku = tables["products"].by_name["sku"]
    assert sku.flags & mysql.FLAG_UNIQUE_KEY and not sku.flags & mysql.FLAG_PRIMARY_KEY
    assert tables["order_items"].handle == ("order_id", "line_no")


def test_tables_grow_mostly_by_inserts_and_updates(workload):
    counts = workload.counts
    gold_rows = sum(workload.expected.points[-1]["row_counts"].values())
    assert gold_rows >= 0.3 * counts["row_events"]  # issue 11: 1M events leave >= 300k rows
    ops = Counter(event.op for event in workload.row_events)
    assert (ops[INSERT] + ops[UPDATE]) / sum(ops.values()) >= 0.85
    assert 0.03 <= ops[DELETE] / sum(ops.values()) <= 0.15
    # Every table grows, through the run.
    counts_by_point = [point["row_counts"] for point in workload.expected.points]
    middle = counts_by_point[len(counts_by_point) // 2]
    for name, rows in counts_by_point[-1].items():
        assert rows > middle[name] > 0, name


def test_updates_and_deletes_mostly_touch_recent_keys(workload):
    newest: dict[str, int] = {}
    ages = []
    for event in workload.row_events:
        if event.table not in ("orders", "customers", "payments", "page_views"):
            continue
        key = values(event)["id"]
        if event.op == INSERT:
            newest[event.table] = max(newest.get(event.table, 0), key)
        else:
            ages.append(newest[event.table] - key)
    ages.sort()
    assert ages[len(ages) // 2] < 500  # the median change is to one of the newest keys


def test_a_few_ddls_and_no_truncate(workload):
    ddls = workload.ddl_events
    assert len(ddls) <= 10
    alters = [e.query for e in ddls if not e.query.startswith("CREATE TABLE")]
    assert alters == [
        "ALTER TABLE `shop`.`customers` ADD COLUMN `phone` varchar(64) NULL",
        "ALTER TABLE `shop`.`order_items` CHANGE COLUMN `qty` `quantity` int(10) unsigned NOT NULL",
        "ALTER TABLE `shop`.`orders` ADD COLUMN `coupon_code` varchar(64) NULL",
        "ALTER TABLE `shop`.`orders` DROP COLUMN `note`",
    ]


def test_about_one_percent_of_row_events_are_replayed(workload):
    replays = default_replays("realistic", TRANSACTIONS)
    routing = route(workload, "open-protocol", partitions=4, idle_partitions=1, replays=replays)
    replayed = sum(replay["row_events"] for replay in routing.replays)
    assert 0.005 <= replayed / workload.counts["row_events"] <= 0.02
    busy = {p for (_, p), segments in routing.streams.items() for s in segments if s.events}
    assert len(busy) >= 3  # rows spread over the three partitions with rows, plus the idle one


def test_values_read_like_a_shop(workload):
    name = re.compile(rf"^({'|'.join(FIRST_NAMES)}) ({'|'.join(map(re.escape, LAST_NAMES))})$")
    email = re.compile(r"^[a-z]+\.[a-z]+\d{1,3}@[a-z]+\.[a-z]+$")
    run_start = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=START_PHYSICAL_MS)
    seen = Counter()
    for event in workload.row_events:
        row = values(event)
        commit = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=event.commit_ts >> 18)
        if event.table == "customers":
            assert name.match(row["name"]) and email.match(row["email"]), row
            first = row["name"].split()[0].lower().replace("é", "e").replace("ë", "e")
            seen["own e-mail"] += row["email"].startswith(f"{first}.")
            seen["customers"] += 1
        if event.table == "customers" and event.op == INSERT:
            born = row["birth_date"]
            assert born is None or "1950-01-01" <= born <= "2006-12-31"
            created = dt.datetime.fromisoformat(row["created_at"])
            assert run_start - dt.timedelta(seconds=5) <= created <= commit
        elif event.table == "orders":
            assert Decimal("5") <= Decimal(row["total"]) <= Decimal("900")
            assert re.fullmatch(r"\d+\.\d{6}", row["total"])
            assert 1 <= row["status"] <= len(ORDER_STATUSES)
            placed = dt.datetime.fromisoformat(row["placed_at"])
            assert run_start - dt.timedelta(seconds=5) <= placed <= commit
            if event.op == INSERT:  # mostly placed just before the commit that inserts it
                seen["fresh orders"] += commit - dt.timedelta(seconds=3) <= placed
                seen["inserted orders"] += 1
            seen["orders"] += 1
        elif event.table == "payments":
            assert 1 <= row["method"] <= len(PAYMENT_METHODS)
        for value in row.values():
            if isinstance(value, str):
                assert not re.search(r"[\x00-\x08\x0b-\x1f]", value)  # no control characters
                assert not re.match(r"^(0000|[3-9]\d{3})-", value)  # no zero or far-off dates
    assert seen["customers"] > 100 and seen["orders"] > 100
    # An address of their own name, inserted with it and kept through updates.
    assert seen["own e-mail"] == seen["customers"]
    assert seen["fresh orders"] >= 0.9 * seen["inserted orders"]  # the rest changed their key
    # The whole run spans minutes, not years.
    elapsed = (workload.events[-1].ts >> 18) - START_PHYSICAL_MS
    assert 0 < elapsed < 3_600_000


def test_orders_and_payments_refer_to_rows_that_exist(workload):
    held = {"customers": set(), "orders": set()}  # ids each table has held so far
    referring = {"orders": ("customer_id", "customers"), "payments": ("order_id", "orders"),
                 "page_views": ("customer_id", "customers")}  # fmt: skip
    seen = Counter()
    # Per transaction: its events are not in the order the generator drew their values.
    for _, events in groupby(workload.row_events, key=lambda event: event.commit_ts):
        events = list(events)
        for event in events:
            if event.table in held and event.columns is not None:
                held[event.table].add(event.columns["id"].value)
        for event in events:
            if event.table in referring and event.op == INSERT:
                column, table = referring[event.table]
                refers = event.columns[column].value
                seen[event.table] += 1
                seen["dangling"] += refers is not None and refers not in held[table]
    assert min(seen[table] for table in referring) > 100
    # Only while the referred table is still empty, at the very start, is a reference made up.
    assert seen["dangling"] <= 3, seen


def test_expected_gold_types_the_shop_values(workload):
    expected = ExpectedGold.from_workload(workload)
    tables = expected.tables_at(workload.resolved_ts[-1])
    columns, rows = tables["shop.orders"]
    assert "coupon_code" in columns and "note" not in columns
    assert {row["status"] for row in rows} <= set(ORDER_STATUSES)
    assert all(isinstance(row["total"], Decimal) for row in rows)
    _, customers = tables["shop.customers"]
    assert {row["tier"] for row in customers} <= set(TIERS)
    assert all(isinstance(row["created_at"], dt.datetime) for row in customers)
