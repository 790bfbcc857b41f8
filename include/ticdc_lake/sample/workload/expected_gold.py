"""What gold should hold for a generated workload, typed, and a check of a lake against it.

The generator's expected log (expected.py) holds every table's rows at each resolved TS in the
lossless JSON form; gold holds typed values. ``ExpectedGold`` types those rows from the
upstream column types (CREATE TABLE and ADD COLUMN DDL), by an implementation independent of
the gold package's, so that comparing the two checks gold rather than restating it:

    expected = ExpectedGold.from_sample(out_dir)        # manifest.json + expected.jsonl
    expected = ExpectedGold.from_workload(workload)     # the same, in memory
    expected.tables_at(ts, zone)                        # {"schema.table": (columns, rows)}
    expected.compare(lake_root, ts, zone)               # [] or what differs, per table

``compare`` reads gold with delta-rs alone (``read_arrow``, no Spark), as any consumer would.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name, split_name
from ticdc_lake.sample.workload.expected import ExpectedLog
from ticdc_lake.sample.workload.generator import Workload
from ticdc_lake.silver import mysql

_NAME = r"`((?:[^`]|``)+)`"  # a quoted identifier (a backtick in it doubled)
_ADDED = re.compile(rf"(?:ADD COLUMN|CHANGE COLUMN {_NAME}) {_NAME} (.+?) (?:NOT )?NULL$")
# Differences listed per table before the rest are only counted.
MAX_DIFFERENCES = 3

Rows = list[dict[str, Any]]


def column_types(
    tables: Iterable[tuple[str, Iterable[tuple[str, str]]]], ddl: Iterable[tuple[str, str]]
) -> dict[str, dict[str, str]]:
    """Per table, every column's MySQL type: ``tables`` gives (name, (column, type)...) as
    created, ``ddl`` (table, query) adds the columns of ADD COLUMN and CHANGE COLUMN (the
    rows before it keep the old name, typed as before)."""
    types = {name: dict(columns) for name, columns in tables}
    for table, query in ddl:
        match = _ADDED.search(query)
        if match:
            types[table][match.group(2).replace("``", "`")] = match.group(3)
    return types


def _zero(text: str) -> bool:
    return text.startswith("0000-00-00") or bool(re.match(r"^\d{4}-(00-\d\d|\d\d-00)", text))


def typed_value(mysql_type: str, value: Any, zone: str) -> Any:
    """A generator value (JSON form) as gold should hold it, TIMESTAMP read in ``zone``."""
    if value is None:
        return None
    parsed = mysql.parse_column_type(mysql_type)
    base = parsed.base
    if isinstance(value, dict):
        return base64.b64decode(value["base64"])
    if base == "bigint" and parsed.unsigned:
        return Decimal(value)
    if base in ("tinyint", "smallint", "mediumint", "int", "bigint", "year", "bit"):
        return int(value)
    if base in ("float", "double"):
        return float(value)
    if base == "decimal":
        return Decimal(value) if parsed.length <= 38 else value
    if base in ("date", "datetime", "timestamp"):
        if _zero(value):
            return None
        if base == "date":
            return dt.date.fromisoformat(value)
        moment = dt.datetime.fromisoformat(value)
        if base == "datetime":
            return moment
        return moment.replace(tzinfo=zoneinfo.ZoneInfo(zone)).astimezone(dt.UTC)
    if base == "enum":
        return ["", *parsed.elements][value]
    if base == "set":
        return ",".join(e for i, e in enumerate(parsed.elements) if value >> i & 1)
    return value


@dataclass(frozen=True)
class ExpectedGold:
    log: ExpectedLog
    types: dict[str, dict[str, str]]  # table -> column -> MySQL type

    @classmethod
    def from_workload(cls, workload: Workload) -> ExpectedGold:
        tables = [
            (table.full_name, [(c.name, c.mysql_type) for c in table.columns])
            for table in workload.tables
        ]
        ddl = [(qualified_name(e.schema, e.table), e.query) for e in workload.ddl_events]
        return cls(workload.expected, column_types(tables, ddl))

    @classmethod
    def from_sample(cls, directory: str | os.PathLike) -> ExpectedGold:
        """From what ``write_generated`` left in ``directory``."""
        directory = Path(directory)
        manifest = json.loads((directory / "manifest.json").read_text())
        tables = [
            (name, [(c["name"], c["mysql_type"]) for c in table["columns"]])
            for name, table in manifest["tables"].items()
        ]
        ddl = [(entry["table"], entry["query"]) for entry in manifest["ddl"]]
        log = ExpectedLog.read_jsonl(directory / manifest["files"]["expected"])
        return cls(log, column_types(tables, ddl))

    def tables_at(self, ts: int, zone: str = "UTC") -> dict[str, tuple[list[str], Rows]]:
        """Per table (``schema.table``), its columns and typed rows at ``ts``."""
        tables = {}
        for name, snapshot in self.log.tables_at(ts).items():
            types = self.types[name]
            rows = [
                {column: typed_value(types[column], row[column], zone) for column in row}
                for row in snapshot.rows
            ]
            tables[name] = (snapshot.columns, rows)
        return tables

    def compare(self, lake: str | os.PathLike, ts: int, zone: str = "UTC") -> list[str]:
        """What differs between the lake's gold tables and the expected tables at ``ts``, row
        by row with typed values; a ``_commit_ts`` above ``ts`` is a difference too."""
        layout = LakeLayout(Path(lake))
        problems = []
        for name, (columns, rows) in sorted(self.tables_at(ts, zone).items()):
            keys = self.log.handle_keys[name]
            found = read_gold(layout, name)
            if found is None:
                if rows:
                    problems.append(f"{name}: no gold table, expected {len(rows)} rows")
                continue
            gold_columns, gold_rows = found
            problems += _differences(name, columns, rows, gold_columns, gold_rows, keys, ts)
        return problems


def read_gold(layout: LakeLayout, name: str) -> tuple[list[str], Rows] | None:
    """A gold table's columns and rows as plain delta-rs reads them (None: no table)."""
    from ticdc_lake.delta import read_arrow

    schema, table = split_name(name)
    path = layout.gold(schema, table)
    if not (path / "_delta_log").is_dir():
        return None
    arrow = read_arrow(path)
    return arrow.column_names, arrow.to_pylist()


def _differences(
    name: str,
    columns: list[str],
    rows: Rows,
    gold_columns: list[str],
    gold_rows: Rows,
    keys: tuple[str, ...],
    ts: int,
) -> list[str]:
    problems = []
    stamps = [row.pop("_commit_ts", None) for row in gold_rows]
    # Without commit TSs (Canal-JSON without the TiDB extension) gold cannot say them.
    late = [stamp for stamp in stamps if stamp is not None and stamp > ts]
    if late:
        problems.append(f"{name}: {len(late)} rows changed after TS {ts} (e.g. {max(late)})")
    if set(gold_columns) - {"_commit_ts"} != set(columns):
        problems.append(f"{name}: columns {sorted(gold_columns)}, expected {sorted(columns)}")

    def by_key(table: Rows) -> dict[tuple, dict]:
        return {tuple(str(row[k]) for k in keys): row for row in table}

    want, got = by_key(rows), by_key(gold_rows)
    if len(got) != len(gold_rows):
        problems.append(f"{name}: {len(gold_rows) - len(got)} duplicate keys in gold")
    missing = sorted(want.keys() - got.keys())
    extra = sorted(got.keys() - want.keys())
    changed = sorted(key for key in want.keys() & got.keys() if want[key] != got[key])
    for label, found in (("missing", missing), ("unexpected", extra), ("different", changed)):
        if found:
            shown = ", ".join(map(str, found[:MAX_DIFFERENCES]))
            hidden = len(found) - MAX_DIFFERENCES
            more = f" and {hidden} more" if hidden > 0 else ""
            problems.append(f"{name}: {len(found)} {label} rows: key {shown}{more}")
    for key in changed[:1]:
        off = [c for c in want[key] if want[key][c] != got[key].get(c)]
        problems.append(
            f"{name}: key {key}: "
            + "; ".join(f"{c} = {got[key].get(c)!r}, expected {want[key][c]!r}" for c in off)
        )
    return problems
