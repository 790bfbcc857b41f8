"""A seeded, simulated TiDB workload: transactions over the canonical tables, in commit order.

What TiDB and TiCDC would produce, before any Kafka dispatch:

* CREATE TABLE DDLs first, then transactions of 1–20 row changes over one or several tables,
  all sharing the transaction's commit TS (a TSO: physical ms << 18 | logical, strictly
  increasing per transaction);
* inserts, updates (full old and new images), deletes (full old image), and handle-key changes
  split into a delete of the old key and an insert of the new one with the same commit TS;
  within a table of a transaction the events are ordered delete < update < insert, as TiCDC
  sorts them;
* DDLs with their own commit TS (ADD COLUMN, DROP COLUMN, TRUNCATE TABLE); later rows follow the
  new schema, and a truncated partitioned table gets new physical partition ids;
* resolved events every few transactions, with ts = the last committed TS.

The expected contents of every table at each resolved TS are recorded as the workload is built
(`Workload.expected`).

Three profiles (`PROFILES`): ``ddl-heavy`` is the edge-case workload the tests are built on
(small, churned tables whose values are every type's extremes, a DDL per ~200 transactions,
TRUNCATEs, re-inserted keys); ``hostile-names`` is the same under names that break naive code
(tables.hostile_tables); ``realistic`` is what a production changefeed looks like (the shop
tables of shop.py growing by sequential keys, mostly inserts and updates of recent keys, some
deletes, a few ALTERs, plausible values). ``iter_workload`` hands the events to a callback as
they are made, so a long workload can be written out without holding it
(output.stream_generated).
"""

from __future__ import annotations

import dataclasses
import marshal
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ticdc_lake.lake.names import backticked
from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, ColumnType, integer_range, random_value
from ticdc_lake.sample.workload.expected import ExpectedLog, SnapshotRecorder
from ticdc_lake.sample.workload.shop import (
    ADDED_COLUMNS,
    CHANGED_COLUMN,
    REFERENCES,
    UPDATED,
    ShopValues,
    shop_tables,
    tenant_tables,
)
from ticdc_lake.sample.workload.tables import ColumnDef, TableDef, canonical_tables, hostile_tables
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    Event,
    ResolvedEvent,
    RowEvent,
)

START_PHYSICAL_MS = 1_717_200_000_000  # 2024-06-01T00:00:00Z: fixed, so outputs are reproducible
_ROWS_PER_TRANSACTION = ((1, 2, 3, 4, 6, 10, 20), (34, 20, 15, 10, 10, 8, 3))
_OP_NAMES = ("insert", "update", "key_change", "delete")
_OP_CUMULATIVE = (45, 75, 82, 100)
_NULL_CHANCE = 0.15
_KEY_WORDS = ("acct", "客户", "ünï", "🎉party", "o'brien", "tab\tkey")
_ORDER = {DELETE: 0, UPDATE: 1, INSERT: 2}
_POOL_SIZE = 512
NO_TOPIC = ""  # logical events have no Kafka coordinates until they are dispatched
DDL_HEAVY, REALISTIC, HOSTILE_NAMES = "ddl-heavy", "realistic", "hostile-names"
# ddl-heavy adds two columns for each it drops: past this width its random DDLs drop instead, so
# a long run's rows stop growing (at 1M row events no table reaches it: the widest has 74).
WIDEST_TABLE = 80
MAX_TENANTS = 1000  # 6,000 tables: bounded, as every count a user gives
PROFILES = (REALISTIC, DDL_HEAVY, HOSTILE_NAMES)
DEFAULT_PROFILE = REALISTIC  # what users get from generate, demo and the benchmarks
REPLAYED_SHARE = 0.01  # realistic: ~1% of row events are sent twice (at-least-once delivery)


@dataclass(frozen=True)
class Profile:
    """What distinguishes the profiles' workloads (the rest of the generator is shared)."""

    name: str
    tables: Callable[[], tuple[TableDef, ...]]
    op_cumulative: tuple[int, ...]  # insert, update, key change, delete
    max_live_rows: int | None  # a table this full deletes instead of inserting
    recent_share: float  # updates and deletes on the newest keys rather than any key
    resolved_every: tuple[int, int]  # transactions between resolved events (low, high)


_PROFILES = {
    DDL_HEAVY: Profile(DDL_HEAVY, canonical_tables, _OP_CUMULATIVE, 5000, 0.0, (2, 6)),
    REALISTIC: Profile(REALISTIC, shop_tables, (52, 90, 92, 100), None, 0.85, (10, 40)),
    HOSTILE_NAMES: Profile(HOSTILE_NAMES, hostile_tables, _OP_CUMULATIVE, 5000, 0.0, (2, 6)),
}
# The hostile-names profile's CHANGE COLUMN: a name with a backtick renamed to another.
HOSTILE_CHANGED_COLUMN = ("a`b", ColumnDef("x`y", BY_NAME["c_text"], nullable=False))


def profile_named(name: str, tenants: int = 1) -> Profile:
    """The profile; ``tenants`` > 1 (realistic only): its shop once per tenant schema."""
    if name not in _PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {name!r}")
    profile = _PROFILES[name]
    if tenants == 1:
        return profile
    if name != REALISTIC or not 1 <= tenants <= MAX_TENANTS:
        raise ValueError(
            f"tenants must be from 1 to {MAX_TENANTS}, and more than 1 only in the "
            f"{REALISTIC} profile, not {tenants} in {name}"
        )
    return dataclasses.replace(profile, tables=lambda: tenant_tables(profile.tables(), tenants))


def default_replays(profile: str, transactions: int) -> int:
    """How many replayed stretches (of ~20 events) a workload gets: 3 in the edge-case profile;
    ~1% of the row events in the realistic one."""
    if profile != REALISTIC:
        return 3
    return max(3, round(transactions * 4 * REPLAYED_SHARE / 20))


def tso(physical_ms: int, logical: int = 0) -> int:
    """A TiDB timestamp: physical milliseconds in the high 46 bits, a logical counter below."""
    return physical_ms << 18 | logical


@dataclass
class Transaction:
    commit_ts: int
    events: list[RowEvent]


@dataclass
class Workload:
    """A generated workload: logical events in commit order and what the tables should hold."""

    seed: int
    tables: tuple[TableDef, ...]  # as created
    final_tables: dict[str, TableDef]  # after every DDL
    events: list[Event]  # CREATE TABLE DDLs, rows, DDLs and resolved events, in commit order
    transactions: list[Transaction]
    expected: ExpectedLog
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def row_events(self) -> list[RowEvent]:
        return [event for event in self.events if isinstance(event, RowEvent)]

    @property
    def ddl_events(self) -> list[DdlEvent]:
        return [event for event in self.events if isinstance(event, DdlEvent)]

    @property
    def resolved_ts(self) -> list[int]:
        return [event.ts for event in self.events if isinstance(event, ResolvedEvent)]


class _KeyPool:
    """Live keys of a table with O(1) random choice and removal."""

    def __init__(self):
        self.keys: list[tuple] = []
        self.index: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: tuple) -> bool:
        return key in self.index

    def add(self, key: tuple) -> None:
        self.index[key] = len(self.keys)
        self.keys.append(key)

    def remove(self, key: tuple) -> None:
        at = self.index.pop(key)
        last = self.keys.pop()
        if at < len(self.keys):
            self.keys[at] = last
            self.index[last] = at

    def choice(self, rng: random.Random) -> tuple:
        return self.keys[rng.randrange(len(self.keys))]

    def clear(self) -> None:
        self.keys.clear()
        self.index.clear()


class _Rows:
    """A table's rows, key → {column: value}, each kept packed (a marshal of its values in
    column order): a dict of objects per row was most of a long workload's memory. Every read
    gives a new dict, so no caller can change a row in place."""

    def __init__(self, columns: list[str]):
        self.columns = tuple(columns)
        self._packed: dict[tuple, bytes] = {}

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, key: tuple) -> dict[str, Any]:
        return dict(zip(self.columns, marshal.loads(self._packed[key]), strict=True))

    def get(self, key: tuple) -> dict[str, Any] | None:
        return self[key] if key in self._packed else None

    def __setitem__(self, key: tuple, values: dict[str, Any]) -> None:
        self._packed[key] = marshal.dumps(tuple([values[name] for name in self.columns]))

    def pop(self, key: tuple) -> dict[str, Any]:
        values = self[key]
        del self._packed[key]
        return values

    def clear(self) -> None:
        self._packed.clear()

    def renamed(self, old: str, new: str) -> _Rows:
        """The same rows with column ``old`` called ``new`` (values are packed by position)."""
        rows = _Rows([new if name == old else name for name in self.columns])
        rows._packed = self._packed
        return rows

    def reshaped(self, columns: list[str]) -> _Rows:
        """The rows under new columns: an added one NULL, a dropped one gone (ALTER TABLE)."""
        rows = _Rows(columns)
        for key in self._packed:
            values = self[key]
            rows[key] = {name: values.get(name) for name in columns}
        return rows


class _Values:
    """Column values from `cases.random_value`, one source per column type.

    Once a type has drawn _POOL_SIZE values, it mostly hands out one of those again: a fresh
    draw costs tens of µs, and long runs need millions of values.
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self._sources: dict[str, Callable[[], Any]] = {}

    def null_share(self, column: ColumnDef) -> float:
        return _NULL_CHANCE if column.nullable else 0.0

    def source(self, column: ColumnDef) -> Callable[[], Any]:
        column_type = column.column_type
        found = self._sources.get(column_type.name)
        if found is None:
            found = self._sources[column_type.name] = self._pooled(column_type)
        return found

    def _pooled(self, column_type: ColumnType) -> Callable[[], Any]:
        pool: list = []
        rng, chance = self.rng, self.rng.random

        def draw() -> Any:
            if len(pool) == _POOL_SIZE and chance() >= 0.03:
                return pool[int(chance() * _POOL_SIZE)]
            value = random_value(column_type, rng)
            if len(pool) < _POOL_SIZE:
                pool.append(value)
            return value

        return draw


class _TableState:
    """A table's current definition, rows (key → column values) and key bookkeeping."""

    def __init__(
        self, table: TableDef, values: _Values | ShopValues, updated: tuple[str, ...] = ()
    ):
        self.values = values
        self.updated = updated  # columns an UPDATE changes (empty: any non-key column)
        self.table = table  # a property: setting it refreshes the column plans below
        self.rows = _Rows(self.columns)
        self.live = _KeyPool()
        self.graveyard: list[tuple] = []  # deleted keys, sometimes inserted again
        self.counter = 0

    @property
    def table(self) -> TableDef:
        return self._table

    @table.setter
    def table(self, table: TableDef) -> None:
        self._table = table
        self.columns = [column.name for column in table.columns]
        self._specs = [(c.name, c.type_code, c.flags, c.mysql_type) for c in table.columns]
        # (name, share of NULLs, draw a value) of every non-key column, in table order
        self.non_key = [
            (c.name, self.values.null_share(c), self.values.source(c))
            for c in table.columns
            if not c.is_key
        ]
        self.updatable = [
            spec for spec in self.non_key if not self.updated or spec[0] in self.updated
        ]
        self.binary_columns = tuple(
            c.name for c in table.columns if mysql.is_binary_string(c.type_code, c.flags)
        )

    def image(self, values: dict[str, Any]) -> dict:
        # The hot path of generation: one Column per value, built without attribute lookups.
        return {
            name: Column(code, flags, values[name], mysql_type)
            for name, code, flags, mysql_type in self._specs
        }


@dataclass
class _Clock:
    """The simulated time of the last commit, in ms."""

    physical_ms: int

    def now(self) -> int:
        return self.physical_ms


def _table_states(
    profile: Profile, tables: tuple[TableDef, ...], rng: random.Random, clock: _Clock
) -> dict[str, _TableState]:
    """Each table's state, its values drawn from the profile's source (realistic: the shop's)."""
    if profile.name != REALISTIC:
        values = _Values(rng)
        return {t.full_name: _TableState(t, values) for t in tables}
    # The clock, not the generator: a closure over the generator would be a reference cycle, and
    # with the collector paused the tables' rows would outlive the run.
    shop_values = ShopValues(rng, clock.now)
    states = {t.full_name: _TableState(t, shop_values, UPDATED.get(t.name, ())) for t in tables}
    shop_values.referred = {column: states[table].live for column, table in REFERENCES.items()}
    return states


class _Timeline:
    """Commit TSs, each after the last, and the events sent on in commit order."""

    def __init__(self, rng: random.Random, emit: Callable[[Event], None]):
        self.rng = rng
        self.clock = _Clock(START_PHYSICAL_MS)
        self.emit = emit
        self.last_commit_ts = 0
        self.last_event: Event | None = None

    def next_commit_ts(self) -> int:
        self.clock.physical_ms += self.rng.randint(1, 40)
        self.last_commit_ts = tso(self.clock.physical_ms, self.rng.randint(0, 3))
        return self.last_commit_ts

    def send(self, event: Event) -> None:
        self.last_event = event
        self.emit(event)


# What a workload counts (`Workload.counts`), in the order the manifest lists them.
_COUNTED = (
    "transactions",
    "multi_table_transactions",
    "row_events",
    "inserts",
    "updates",
    "deletes",
    "key_changes",
    "ddl_events",
    "resolved_points",
)


class _Generator:
    """The run: CREATE TABLEs, then transactions with DDLs between them and resolved events."""

    def __init__(
        self,
        seed: int,
        transactions: int,
        resolved_every: tuple[int, int],
        ddl: bool,
        profile: Profile,
        emit: Callable[[Event], None] | None = None,
        expected: type[ExpectedLog] | Callable[..., ExpectedLog] = ExpectedLog,
    ):
        self.rng = random.Random(seed)
        self.seed = seed
        self.transaction_count = transactions
        self.resolved_every = resolved_every
        self.initial = profile.tables()
        self.events: list[Event] = []
        # Streaming (`emit` given): events go to `emit`, transactions are not kept.
        self.timeline = _Timeline(self.rng, self.events.append if emit is None else emit)
        self.transactions: list[Transaction] | None = [] if emit is None else None
        self.states = _table_states(profile, self.initial, self.rng, self.timeline.clock)
        self.names = list(self.states)
        self.expected = expected({t.full_name: t.handle for t in self.initial})
        self.recorder = SnapshotRecorder(self.expected)
        self.counts = dict.fromkeys(_COUNTED, 0)
        self.row_changes = _RowChanges(self.rng, profile, self.recorder, self.counts)
        self.schema = _SchemaChanges(
            self.rng, profile, self.states, self.timeline, self.recorder, self.counts
        )
        if ddl:
            self.schema.plan(transactions)

    def run(self) -> Workload:
        self.schema.create_tables()
        until_resolved = self.rng.randint(*self.resolved_every)
        for number in range(self.transaction_count):
            self.schema.before_transaction(number)
            self._transaction()
            until_resolved -= 1
            if until_resolved == 0:
                self._resolved()
                until_resolved = self.rng.randint(*self.resolved_every)
        if not isinstance(self.timeline.last_event, ResolvedEvent):
            self._resolved()
        return Workload(
            seed=self.seed,
            tables=self.initial,
            final_tables={name: state.table for name, state in self.states.items()},
            events=self.events,
            transactions=self.transactions,
            expected=self.expected,
            counts=self.counts,
        )

    def _resolved(self) -> None:
        ts = self.timeline.last_commit_ts
        self.timeline.send(ResolvedEvent(ts, NO_TOPIC, 0, 0))
        self.recorder.point(
            ts, {n: (s.columns, s.rows, s.binary_columns) for n, s in self.states.items()}
        )
        self.counts["resolved_points"] += 1

    def _transaction(self) -> None:
        commit_ts = self.timeline.next_commit_ts()
        rows, weights = _ROWS_PER_TRANSACTION
        size = self.rng.choices(rows, weights)[0]
        touched: dict[str, set[tuple]] = {}
        events: list[RowEvent] = []
        row_change = self.row_changes.change
        for _ in range(size):
            name = self.rng.choice(self.names)
            events.extend(row_change(commit_ts, self.states[name], touched.setdefault(name, set())))
        # TiCDC emits a transaction table by table; within a table deletes, updates, inserts.
        first_seen = {}
        for event in events:
            first_seen.setdefault(event.table, len(first_seen))
        events.sort(key=lambda e: (first_seen[e.table], _ORDER[e.op]))
        for event in events:
            self.timeline.send(event)
        if self.transactions is not None:
            self.transactions.append(Transaction(commit_ts, events))
        self.counts["transactions"] += 1
        self.counts["row_events"] += len(events)
        self.counts["multi_table_transactions"] += len(first_seen) > 1


class _RowChanges:
    """A transaction's row changes: which operation on which key, and the events it makes."""

    def __init__(
        self,
        rng: random.Random,
        profile: Profile,
        recorder: SnapshotRecorder,
        counts: dict[str, int],
    ):
        self.rng = rng
        self.profile = profile
        self.recorder = recorder
        self.counts = counts

    def change(self, commit_ts: int, state: _TableState, touched: set[tuple]) -> list[RowEvent]:
        """One row change (two events for a key change); no row is touched twice per transaction."""
        profile = self.profile
        op = self.rng.choices(_OP_NAMES, cum_weights=profile.op_cumulative)[0]
        free = len(state.live) - len(touched & state.live.index.keys())
        if op != "insert" and free <= 0:
            op = "insert"
        full = profile.max_live_rows is not None and len(state.live) >= profile.max_live_rows
        if op == "insert" and full and free > 0:
            op = "delete"  # keep tables at a steady size in long runs
        if op == "insert":
            return [self._insert(commit_ts, state, touched)]
        key = self._existing_key(state)
        while key in touched:
            key = self._existing_key(state)
        touched.add(key)
        if op == "update":
            return [self._update(commit_ts, state, key)]
        if op == "delete":
            return [self._delete(commit_ts, state, key)]
        self.counts["key_changes"] += 1
        values = dict(state.rows[key])
        delete = self._delete(commit_ts, state, key)
        new_key = self._new_key(state, touched)
        touched.add(new_key)
        values.update(zip(state.table.handle, new_key, strict=True))
        return [delete, self._put(commit_ts, state, new_key, values)]

    def _insert(self, commit_ts: int, state: _TableState, touched: set[tuple]) -> RowEvent:
        key = self._new_key(state, touched)
        touched.add(key)
        values = dict(zip(state.table.handle, key, strict=True))
        chance = self.rng.random
        for name, null_share, draw in state.non_key:
            values[name] = None if null_share and chance() < null_share else draw()
        values = {name: values[name] for name in state.columns}  # table column order
        return self._put(commit_ts, state, key, values)

    def _put(self, commit_ts: int, state: _TableState, key: tuple, values: dict) -> RowEvent:
        state.rows[key] = values
        state.live.add(key)
        self.recorder.changed(state.table.full_name, key)
        self.counts["inserts"] += 1
        return self._event(commit_ts, state, INSERT, key, state.image(values), None)

    def _update(self, commit_ts: int, state: _TableState, key: tuple) -> RowEvent:
        old = state.rows[key]
        new = dict(old)
        candidates = state.updatable
        chance = self.rng.random
        changes = min(len(candidates), self.rng.randint(1, 3))
        for name, null_share, draw in self.rng.sample(candidates, changes):
            new[name] = None if null_share and chance() < null_share else draw()
        for _ in range(20):  # TiDB writes no change event for an UPDATE that changes nothing
            if new != old:
                break
            name, _, draw = self.rng.choice(candidates)
            new[name] = draw()
        state.rows[key] = new
        self.recorder.changed(state.table.full_name, key)
        self.counts["updates"] += 1
        return self._event(commit_ts, state, UPDATE, key, state.image(new), state.image(old))

    def _delete(self, commit_ts: int, state: _TableState, key: tuple) -> RowEvent:
        old = state.rows.pop(key)
        state.live.remove(key)
        state.graveyard.append(key)
        self.recorder.changed(state.table.full_name, key)
        self.counts["deletes"] += 1
        return self._event(commit_ts, state, DELETE, key, None, state.image(old))

    def _event(self, commit_ts, state, op, key, columns, old_columns) -> RowEvent:
        table = state.table
        return RowEvent(
            commit_ts=commit_ts,
            schema=table.schema,
            table=table.name,
            op=op,
            columns=columns,
            old_columns=old_columns,
            topic=NO_TOPIC,
            partition=0,
            offset=0,
            partition_id=table.partition_of(key),
        )

    def _existing_key(self, state: _TableState) -> tuple:
        """A live key: in the realistic profile mostly one of the newest (OLTP changes are)."""
        if self.profile.recent_share and self.rng.random() < self.profile.recent_share:
            keys = state.live.keys
            back = min(len(keys) - 1, int(self.rng.expovariate(1 / 300)))
            return keys[len(keys) - 1 - back]
        return state.live.choice(self.rng)

    def _new_key(self, state: _TableState, touched: set[tuple]) -> tuple:
        """A key not live and not used in this transaction; now and then a deleted one again
        (realistic: the next of a sequence, as AUTO_INCREMENT gives them)."""
        if self.profile.name == REALISTIC:
            state.counter += 1
            return _sequential_key(state.table, state.counter)
        if state.graveyard and self.rng.random() < 0.05:
            key = state.graveyard.pop(self.rng.randrange(len(state.graveyard)))
            if key not in state.live and key not in touched:
                return key
        while True:
            key = tuple(self._key_part(state, column) for column in _key_columns(state.table))
            if key not in state.live and key not in touched:
                return key

    def _key_part(self, state: _TableState, column: ColumnDef) -> Any:
        if column.type_code in mysql.STRING_TYPES:
            state.counter += 1
            return f"{self.rng.choice(_KEY_WORDS)}-{state.counter}"
        low, high = integer_range(column.column_type)
        if self.rng.random() < 0.02:
            return self.rng.choice((low, high, 0))
        return self.rng.randint(low, high)


class _SchemaChanges:
    """A run's DDLs: the CREATE TABLEs, one of each kind at fixed points, random ones between."""

    def __init__(
        self,
        rng: random.Random,
        profile: Profile,
        states: dict[str, _TableState],
        timeline: _Timeline,
        recorder: SnapshotRecorder,
        counts: dict[str, int],
    ):
        self.rng = rng
        self.profile = profile
        self.states = states
        self.names = list(states)
        self.timeline = timeline
        self.recorder = recorder
        self.counts = counts
        self.milestones: dict[int, tuple[Callable, tuple]] = {}
        self.random_ddl = False
        self.added_columns = 0
        self.next_table_id = 1000

    def plan(self, transactions: int) -> None:
        """Plan a run of ``transactions``: its milestones, random DDLs in edge-case profiles."""
        self.milestones = self._milestones(transactions)
        self.random_ddl = self.profile.name != REALISTIC

    def create_tables(self) -> None:
        for name in self.names:
            table = self.states[name].table
            self._ddl(table, table.create_sql(), mysql.ACTION_CREATE_TABLE)
            self.recorder.truncated(name)

    def before_transaction(self, number: int) -> None:
        """The DDL planned before transaction ``number``, or now and then a random one."""
        milestone = self.milestones.get(number)
        if milestone is not None:
            method, arguments = milestone
            method(self, *arguments)
        elif self.random_ddl and self.milestones and self.rng.random() < 1 / 200:
            self._random_ddl()

    def _ddl(self, table: TableDef, query: str, action: int) -> None:
        commit_ts = self.timeline.next_commit_ts()
        self.timeline.send(
            DdlEvent(commit_ts, table.schema, table.name, query, action, NO_TOPIC, 0, 0)
        )
        self.counts["ddl_events"] += 1

    def _milestones(self, transactions: int) -> dict[int, tuple[Callable, tuple]]:
        """One DDL of each kind at fixed fractions of the run (when it is long enough), as
        (method, arguments): closures over this object, kept in it, would be reference cycles."""
        if transactions < 10:
            return {}
        changes = type(self)
        if self.profile.name == REALISTIC:
            (first_table, first), (second_table, second) = ADDED_COLUMNS
            plan = {
                0.3: (changes._add_column, (first_table, first)),
                0.45: (changes._change_column, CHANGED_COLUMN),
                0.6: (changes._add_column, (second_table, second)),
                0.85: (changes._drop_column, ("shop.orders", "note")),
            }
        else:
            # The edge-case profiles' first four tables: the canonical ones, in their roles.
            numbers, strings, times, orders = self.names[:4]
            plan = {
                0.25: (changes._add_column, (numbers,)),
                0.4: (changes._add_column, (strings,)),
                0.5: (changes._truncate, (orders,)),
                0.6: (changes._drop_column, (times, "c_datetime")),
                0.8: (changes._drop_column, (numbers, None)),
            }
            if self.profile.name == HOSTILE_NAMES:
                plan[0.7] = (changes._change_column, (orders, *HOSTILE_CHANGED_COLUMN))
        return {int(transactions * fraction): step for fraction, step in plan.items()}

    def _random_ddl(self) -> None:
        name = self.rng.choice(self.names)
        kind = self.rng.choice(("add", "add", "drop", "truncate"))
        if kind == "add" and len(self.states[name].table.columns) >= WIDEST_TABLE:
            kind = "drop"
        if kind == "add":
            self._add_column(name)
        elif kind == "drop":
            self._drop_column(name, None)
        else:
            self._truncate(name)

    def _add_column(self, name: str, column: ColumnDef | None = None) -> None:
        state = self.states[name]
        self.added_columns += 1
        if column is None:
            column = ColumnDef(f"c_added_{self.added_columns}", self.rng.choice(COLUMN_TYPES))
        state.table = state.table.add_column(column)
        state.rows = state.rows.reshaped(state.columns)
        self._ddl(
            state.table,
            f"ALTER TABLE {state.table.quoted} ADD COLUMN {state.table.columns[-1].sql()}",
            mysql.ACTION_ADD_COLUMN,
        )

    def _drop_column(self, name: str, column_name: str | None) -> None:
        """Drop `column_name`, or the last non-key column added or else present."""
        state = self.states[name]
        droppable = [c.name for c in state.table.columns if not c.is_key]
        if len(droppable) < 2:
            return
        if column_name not in droppable:
            added = [c for c in droppable if c.startswith("c_added_")]
            column_name = (added or droppable)[-1]
        state.table = state.table.drop_column(column_name)
        state.rows = state.rows.reshaped(state.columns)
        self._ddl(
            state.table,
            f"ALTER TABLE {state.table.quoted} DROP COLUMN {backticked(column_name)}",
            mysql.ACTION_DROP_COLUMN,
        )

    def _change_column(self, name: str, old: str, column: ColumnDef) -> None:
        """CHANGE COLUMN: renamed, with a type that holds every value the column has."""
        state = self.states[name]
        state.updated = tuple(column.name if c == old else c for c in state.updated)
        state.table = state.table.rename_column(old, column.name).modify_column(column)
        state.rows = state.rows.renamed(old, column.name)
        self.recorder.renamed(name, old, column.name)
        changed = state.table.by_name[column.name]
        self._ddl(
            state.table,
            f"ALTER TABLE {state.table.quoted} CHANGE COLUMN {backticked(old)} {changed.sql()}",
            mysql.ACTION_MODIFY_COLUMN,
        )

    def _truncate(self, name: str) -> None:
        state = self.states[name]
        self.next_table_id += 10
        state.table = state.table.truncated(self.next_table_id)
        state.graveyard.extend(state.live.keys)
        state.rows.clear()
        state.live.clear()
        self._ddl(state.table, f"TRUNCATE TABLE {state.table.quoted}", mysql.ACTION_TRUNCATE_TABLE)
        self.recorder.truncated(name)


def _key_columns(table: TableDef) -> list[ColumnDef]:
    return [table.by_name[name] for name in table.handle]


def _sequential_key(table: TableDef, number: int) -> tuple:
    """The `number`th key of a table: ids count up; order lines are 1–4 of an order; string
    keys are SKUs."""
    columns = _key_columns(table)
    if len(columns) == 2:
        return (1_000 + (number - 1) // 4, (number - 1) % 4 + 1)
    if columns[0].type_code in mysql.STRING_TYPES:
        return (f"SKU-{number:06d}",)
    return (number,)


def generate_workload(
    seed: int = 0,
    transactions: int = 200,
    *,
    resolved_every: tuple[int, int] | None = None,
    ddl: bool = True,
    profile: str = DDL_HEAVY,
    tenants: int = 1,
) -> Workload:
    """A reproducible workload: the same arguments always give the same events and snapshots.

    Held in memory whole (events, transactions, every table at every resolved TS): for tests
    and small samples; `iter_workload` streams."""
    with gc_paused():
        return _generator(seed, transactions, resolved_every, ddl, profile, tenants).run()


def iter_workload(
    emit: Callable[[Event], None],
    expected: Callable[[dict[str, tuple[str, ...]]], ExpectedLog],
    seed: int = 0,
    transactions: int = 200,
    *,
    profile: str = DDL_HEAVY,
    tenants: int = 1,
) -> Workload:
    """The same workload as `generate_workload`, each event handed to `emit` as it is made and
    each resolved TS's expected tables to the log `expected(handle_keys)` builds (which may
    write them out). The Workload returned holds no events and no transactions."""
    generator = _generator(seed, transactions, None, True, profile, tenants, emit, expected)
    with gc_paused():
        return generator.run()


def _generator(
    seed, transactions, resolved_every, ddl, profile, tenants=1, emit=None, expected=ExpectedLog
):
    chosen = profile_named(profile, tenants)
    if transactions < 0:
        raise ValueError("transactions must not be negative")
    low, high = resolved_every = resolved_every or chosen.resolved_every
    if not 1 <= low <= high:
        raise ValueError("resolved_every must be (low, high) with 1 <= low <= high")
    return _Generator(seed, transactions, resolved_every, ddl, chosen, emit, expected)
