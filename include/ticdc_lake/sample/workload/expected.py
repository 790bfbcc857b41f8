"""The expected contents of every table at each resolved TS, kept as a compact change log.

Storing every table in full at every resolved TS grows with (resolved points × rows); this log
stores, per resolved TS, only the tables that changed since the previous one: their columns,
whether they were truncated, the rows upserted and the keys deleted. `ExpectedLog.snapshots()`
folds it back into full tables, exactly.

Rows are in the lossless JSON form of `events.json_value` (bytes as {"base64": ...}), sorted by
handle key. On disk (`expected.jsonl`): a header line `{"format", "handle_keys"}`, then one line
per resolved TS `{"resolved_ts", "row_counts": {"schema.table": n}, "tables": {"schema.table":
{"columns": [...], "truncated": true?, "renamed": {old: new}?, "upserts": [...], "deletes":
[[key values], ...]}}}`, listing only tables changed since the previous line. Folding a line: if
`truncated`, start from no rows; if `renamed` (RENAME/CHANGE COLUMN), rows keep their values
under the new names; if `columns` differ from before (ADD/DROP COLUMN), keep each row's values
of the new columns (NULL for an added one); then remove `deletes` and put `upserts`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ticdc_lake.silver.events import json_value

FORMAT = "ticdc-lake expected v1"


@dataclass
class TableSnapshot:
    columns: list[str]
    rows: list[dict[str, Any]]  # JSON value form, sorted by handle key


def json_row(columns: list[str], values: dict[str, Any]) -> dict[str, Any]:
    return {name: json_value(values.get(name)) for name in columns}


def _sort_key(row: dict[str, Any], handle: tuple[str, ...]) -> tuple:
    return tuple(_orderable(row[name]) for name in handle)


def _orderable(value: Any) -> tuple:
    # Key columns of one table share a type; the tag keeps mixed types comparable anyway.
    if isinstance(value, int):
        return (0, value, "")
    return (1, 0, orjson.dumps(value).decode())


def _key_bytes(values: list[Any]) -> bytes:
    return orjson.dumps(values)


def _sorted(rows, handle: tuple[str, ...]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: _sort_key(row, handle))


class ExpectedLog:
    """Per resolved TS, the changes to each table since the previous resolved TS."""

    def __init__(self, handle_keys: dict[str, tuple[str, ...]]):
        self.handle_keys = {name: tuple(handle) for name, handle in handle_keys.items()}
        self.points: list[dict[str, Any]] = []

    @property
    def resolved_ts(self) -> list[int]:
        return [point["resolved_ts"] for point in self.points]

    def add_point(
        self,
        resolved_ts: int,
        tables: dict[str, dict[str, Any]],
        row_counts: dict[str, int] | None = None,
    ) -> None:
        if self.points and resolved_ts < self.points[-1]["resolved_ts"]:
            raise ValueError("resolved TS must not go back")
        self.points.append({"resolved_ts": resolved_ts, "row_counts": row_counts, "tables": tables})

    def snapshots(self) -> Iterator[tuple[int, dict[str, TableSnapshot]]]:
        """(resolved TS, every table's full contents then), in TS order."""
        state: dict[str, tuple[list[str], dict[bytes, dict]]] = {}
        for point in self.points:
            for name, change in point["tables"].items():
                columns = change["columns"]
                old_columns, rows = state.get(name, (columns, {}))
                renamed = change.get("renamed")
                if change.get("truncated"):
                    rows = {}
                elif renamed:  # RENAME/CHANGE COLUMN: existing rows keep their values
                    rows = {
                        key: json_row(columns, {renamed.get(c, c): v for c, v in row.items()})
                        for key, row in rows.items()
                    }
                elif old_columns != columns:  # ADD/DROP COLUMN: existing rows follow
                    rows = {key: json_row(columns, row) for key, row in rows.items()}
                for key in change.get("deletes", ()):
                    rows.pop(_key_bytes(key), None)
                handle = self.handle_keys[name]
                for row in change.get("upserts", ()):
                    rows[_key_bytes([row[part] for part in handle])] = row
                state[name] = (columns, rows)
            yield (
                point["resolved_ts"],
                {
                    name: TableSnapshot(
                        list(columns), _sorted(rows.values(), self.handle_keys[name])
                    )
                    for name, (columns, rows) in state.items()
                },
            )

    def tables_at(self, ts: int) -> dict[str, TableSnapshot]:
        """Every table after the transactions with commit TS <= the last resolved TS <= `ts`."""
        found: dict[str, TableSnapshot] = {}
        for resolved_ts, tables in self.snapshots():
            if resolved_ts > ts:
                break
            found = tables
        return found

    def write_jsonl(self, path: str | os.PathLike) -> None:
        with open(path, "wb") as sink:
            header = {"format": FORMAT, "handle_keys": self.handle_keys}
            sink.write(orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE))
            for point in self.points:
                sink.write(orjson.dumps(point, option=orjson.OPT_APPEND_NEWLINE))

    @classmethod
    def read_jsonl(cls, path: str | os.PathLike) -> ExpectedLog:
        with open(path, "rb") as source:
            header = orjson.loads(source.readline())
            if header.get("format") != FORMAT:
                raise ValueError(f"{path} is not a {FORMAT} file")
            log = cls(header["handle_keys"])
            for line in source:
                if line.strip():
                    point = orjson.loads(line)
                    log.add_point(point["resolved_ts"], point["tables"], point.get("row_counts"))
        return log


class SnapshotRecorder:
    """Collects the changes between resolved TSs while the generator applies transactions."""

    def __init__(self, log: ExpectedLog):
        self.log = log
        self._dirty: dict[str, set[tuple]] = {}
        self._truncated: set[str] = set()
        self._renamed: dict[str, dict[str, str]] = {}  # table -> old name -> new name
        self._columns: dict[str, list[str]] = {}

    def changed(self, table: str, key: tuple) -> None:
        self._dirty.setdefault(table, set()).add(key)

    def truncated(self, table: str) -> None:
        """The table was emptied (TRUNCATE, or created): earlier rows are gone."""
        self._truncated.add(table)

    def renamed(self, table: str, old: str, new: str) -> None:
        """A column was renamed (RENAME or CHANGE COLUMN): earlier rows keep its values."""
        names = self._renamed.setdefault(table, {})
        earlier = next((before for before, now in names.items() if now == old), old)
        names[earlier] = new

    def point(
        self,
        resolved_ts: int,
        tables: dict[str, tuple[list[str], dict[tuple, dict[str, Any]], tuple[str, ...]]],
    ) -> None:
        """Record the state at `resolved_ts`.

        `tables` maps name → (columns, key → row values in column order, binary columns). Rows
        must never be changed in place afterwards: rows without bytes are kept as they are.
        """
        changes: dict[str, dict[str, Any]] = {}
        for name, (columns, rows, binary) in sorted(tables.items()):
            dirty = self._dirty.get(name, ())
            truncated = name in self._truncated
            renamed = self._renamed.get(name)
            if not dirty and not truncated and not renamed and self._columns.get(name) == columns:
                continue
            self._columns[name] = list(columns)
            upserts, deletes = [], []
            for key in sorted(dirty, key=lambda k: tuple(map(_orderable, k))):
                values = rows.get(key)
                if values is not None:
                    upserts.append(_json_form(values, binary))
                elif not truncated:
                    deletes.append([json_value(part) for part in key])
            change: dict[str, Any] = {"columns": list(columns)}
            if truncated:
                change["truncated"] = True
            elif renamed:
                change["renamed"] = dict(renamed)
            change.update(upserts=upserts, deletes=deletes)
            changes[name] = change
        row_counts = {name: len(rows) for name, (_, rows, _) in sorted(tables.items())}
        self.log.add_point(resolved_ts, changes, row_counts)
        self._dirty.clear()
        self._truncated.clear()
        self._renamed.clear()


def _json_form(values: dict[str, Any], binary: tuple[str, ...]) -> dict[str, Any]:
    """A row in JSON value form: only bytes differ, so other rows are shared, not copied."""
    if not binary:
        return values
    row = dict(values)
    for name in binary:
        row[name] = json_value(row[name])
    return row
