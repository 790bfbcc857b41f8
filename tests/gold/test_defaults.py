"""ADD COLUMN's value in the rows already there: parsed DEFAULTs, as TiDB fills them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from ticdc_lake.gold import ddl
from ticdc_lake.gold.catalog import AddColumns, Catalog
from ticdc_lake.gold.defaults import added_values
from ticdc_lake.gold.types import ColumnSpec, gold_type

# 2024-03-01 12:34:56.789 UTC as a TSO (physical milliseconds << 18).
DDL_TS = int(dt.datetime(2024, 3, 1, 12, 34, 56, 789000, tzinfo=dt.UTC).timestamp() * 1000) << 18


def added(definition: str):
    """The value the rows already there get in the one column ``definition`` adds."""
    (action,) = ddl.parse_ddl(f"ALTER TABLE s.t ADD COLUMN {definition}", "s")
    (value,) = added_values(action.columns, DDL_TS, "Asia/Shanghai")
    return value


def gold(definition: str):
    value = added(definition)
    return value.gold_value(gold_type(value.spec).arrow, "the DDL").as_py()


@pytest.mark.parametrize(
    ("definition", "kind", "text", "binary"),
    [
        ("c int NOT NULL DEFAULT -5", ddl.LITERAL, "-5", None),
        ("c decimal(5,2) DEFAULT - -1.5", ddl.LITERAL, "1.5", None),
        ("c varchar(9) DEFAULT _utf8mb4'new' COMMENT 'x'", ddl.LITERAL, "new", None),
        ("c varchar(9) DEFAULT N'it''s'", ddl.LITERAL, "it's", None),
        ("c bit(3) DEFAULT b'101'", ddl.LITERAL, None, b"\x05"),
        ("c varbinary(4) DEFAULT 0xff01", ddl.LITERAL, None, b"\xff\x01"),
        ("c varbinary(4) DEFAULT x'0a'", ddl.LITERAL, None, b"\x0a"),
        ("c bool DEFAULT true", ddl.LITERAL, "1", None),
        ("c date DEFAULT DATE '2020-02-29'", ddl.LITERAL, "2020-02-29", None),
        ("c int DEFAULT NULL", ddl.NULL_DEFAULT, None, None),
        ("c timestamp(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)", ddl.NOW,
         None, None),
        ("c datetime DEFAULT now()", ddl.NOW, None, None),
        ("c char(36) DEFAULT (uuid())", ddl.EXPRESSION, None, None),
    ],
)  # fmt: skip
def test_default_clauses_are_read(definition, kind, text, binary):
    (action,) = ddl.parse_ddl(f"ALTER TABLE s.t ADD COLUMN {definition}", "s")
    assert action.columns[0].default == ddl.DefaultValue(kind, text, binary)


def test_a_column_without_default_has_none():
    (action,) = ddl.parse_ddl("ALTER TABLE s.t ADD COLUMN c int NOT NULL COMMENT 'x'", "s")
    assert action.columns[0].default is None


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ("c int NOT NULL DEFAULT -5", -5),
        ("c int DEFAULT 7", 7),
        ("c bigint unsigned DEFAULT 18446744073709551615", Decimal(18446744073709551615)),
        ("c decimal(5,2) NOT NULL DEFAULT '3.5'", Decimal("3.50")),
        ("c double DEFAULT 2.5e0", 2.5),
        ("c varchar(16) NOT NULL DEFAULT 'new'", "new"),
        ("c enum('Small','Large') NOT NULL DEFAULT 'large'", "Large"),  # case-insensitive
        ("c set('a','b','c') DEFAULT 'c,a'", "a,c"),
        ("c bit(8) DEFAULT b'101'", 5),
        ("c varbinary(4) DEFAULT 0xff01", b"\xff\x01"),
        ("c blob DEFAULT 'ab'", b"ab"),
        ("c date DEFAULT '2020-02-29'", dt.date(2020, 2, 29)),
        ("c datetime(3) DEFAULT '2020-02-29 10:00:00.5'",
         dt.datetime(2020, 2, 29, 10, 0, 0, 500000)),
        # A TIMESTAMP literal is upstream's local time: 08:00 in Shanghai is midnight UTC.
        ("c timestamp NULL DEFAULT '2020-01-01 08:00:00'", dt.datetime(2020, 1, 1, tzinfo=dt.UTC)),
        # CURRENT_TIMESTAMP: when the DDL ran, as its commit TS says.
        ("c timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
         dt.datetime(2024, 3, 1, 12, 34, 56, 789000, tzinfo=dt.UTC)),
        ("c datetime DEFAULT CURRENT_TIMESTAMP", dt.datetime(2024, 3, 1, 20, 34, 56, 789000)),
        ("c date DEFAULT (CURRENT_DATE)", None),  # an expression gold cannot run
        ("c int", None),
        ("c int DEFAULT NULL", None),
        # NOT NULL without a DEFAULT: the type's zero value (zero dates are NULL in gold).
        ("c int NOT NULL", 0),
        ("c varchar(3) NOT NULL", ""),
        ("c enum('x','y') NOT NULL", "x"),
        ("c json NOT NULL", "null"),
        ("c time NOT NULL", "00:00:00"),
        ("c datetime NOT NULL", None),
        ("c binary(2) NOT NULL", b"\0\0"),
    ],
)  # fmt: skip
def test_rows_already_there_get_what_tidb_gives_them(definition, expected):
    assert gold(definition) == expected


def test_a_default_that_does_not_fit_its_column_names_the_ddl():
    with pytest.raises(Exception, match="the DDL"):
        gold("c int DEFAULT 'many'")


def test_the_catalog_carries_the_definitions_with_their_defaults():
    catalog = Catalog()
    catalog.apply(ddl.parse_ddl("CREATE TABLE s.t (id int PRIMARY KEY)", "s")[0])
    (effect,) = catalog.apply(ddl.parse_ddl("ALTER TABLE s.t ADD c int DEFAULT 3", "s")[0])
    assert isinstance(effect, AddColumns)
    assert effect.columns == (("c", ColumnSpec.from_ddl(effect.definitions[0])),)
    assert effect.definitions[0].default == ddl.DefaultValue(ddl.LITERAL, "3")
