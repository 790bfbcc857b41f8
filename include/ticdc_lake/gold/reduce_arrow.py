"""reduce.py's transforms on the driver, in pyarrow and numpy: the same change set, with no
Spark job.

Each function does what its namesake in reduce.py does, and tests hold the two equal. Names,
tables, values and keys become integer codes, so the rules run as numpy sorts and lookups; an
action carries its change's row and which image it takes, and only the winners are copied.
A run is reduced a chunk at a time (``reduce_chunk``), and the chunks' winners together
(``latest``): the last action per key of a run is the last of its chunks' last ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticdc_lake.gold.reduce import IMAGE_FIELDS, FoldRange, fold_ranges
from ticdc_lake.silver.rows import COLUMN_TYPE, IMAGE_TYPE

REDUCED_SCHEMA = pa.schema(
    [
        ("schema", pa.string()),
        ("table", pa.string()),
        ("segment", pa.int32()),
        ("deleted", pa.bool_()),
        ("image", IMAGE_TYPE),
        ("handle", pa.list_(pa.string())),
        ("commit_ts", pa.int64()),
        ("order_ts", pa.int64()),
        ("handle_key_only", pa.bool_()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)
# An image's handle-key columns: its key, as values.
KEY_VALUES_TYPE = pa.list_(
    pa.struct([("name", pa.string()), ("text", pa.string()), ("binary", pa.binary())])
)
# A chunk's winners, to be merged with other chunks' (``latest``): what orders them too, and
# their keys' values (a key's code holds within a chunk only).
CANDIDATE_SCHEMA = pa.schema(
    [
        *REDUCED_SCHEMA,
        ("index", pa.int32()),
        ("sub", pa.int8()),
        ("key_values", KEY_VALUES_TYPE),
    ]
)
# What ``latest`` ranks chunks' winners by.
RANK_COLUMNS = (
    "schema", "table", "segment", "order_ts", "topic", "partition", "offset", "index", "sub",
    "key_values",
)  # fmt: skip
SegmentKey = tuple[str, str, int]  # (schema, table, segment number)


def reduce_chunk(
    changes: pa.Table,
    barriers: Mapping[tuple[str, str], Sequence[int | None]],
    points: Mapping[SegmentKey, Sequence],
    fallback_handles: Mapping[tuple[str, str], Sequence[str]],
    *,
    replays: bool,
    selected: np.ndarray | None = None,
) -> pa.Table | None:
    """The ``selected`` ``changes`` (silver's columns, the selected ones' commit TSs known; a
    run's or some of them; all of them when None) reduced as reduce.py reduces them, copies
    of an event beyond its first dropped unless ``replays``: the winners as CANDIDATE_SCHEMA's
    rows (``by_segment`` splits them). None when only Spark's path handles the run (barriers
    out of TS order). The changes not selected neither win nor lose: mostly the selected ones
    (as in most runs), the others are keyed along rather than every image copied to leave
    them out (1M realistic changes' reduce 5.15 -> 4.8 s); mostly others (settled ones a later
    run reads again), or any without a commit TS (TSs must rank as integers), they are left
    out first."""
    if selected is not None and (
        selected.sum() * 2 < len(selected) or changes.column("commit_ts").null_count
    ):
        changes, selected = changes.filter(pa.array(selected)), None
    if selected is not None:
        changes = changes.append_column("selected", pa.array(selected, pa.bool_()))
    segmented = _segmented(changes, barriers)
    if segmented is None:
        return None
    ranges = fold_ranges(points)
    now, later = _reshaped_before_and_after_keys(ranges, segmented, fallback_handles)
    actions = key_actions(with_folds(segmented, ranges, reshaping=now), fallback_handles)
    return candidates_of(actions, winners(actions, replays=replays), reshaping=later)


def latest(candidates: pa.Table) -> np.ndarray:
    """Of chunks' winners (``reduce_chunk``; RANK_COLUMNS of them at least), the numbers of
    the last per (schema, table, segment, key of its image): by order TS, then Kafka position,
    then ``sub``, as ``winners`` ranks them."""
    values = _one_chunk(candidates.column("key_values"))
    (key,), _ = _key_codes([values], None, _Names.of([_flat_names(values)], []))
    segment = _numpy(candidates.column("segment"))
    ranked = (_numpy(candidates.column("order_ts")), *_position(candidates))
    sub = _numpy(candidates.column("sub"))
    everyone = np.arange(candidates.num_rows)
    chosen = _last_of((_table_codes(candidates), segment, key), (*ranked, sub), everyone)
    return np.sort(chosen)


def _segmented(
    changes: pa.Table, barriers: Mapping[tuple[str, str], Sequence[int | None]]
) -> pa.Table | None:
    """Silver's ``changes`` with ``order_ts`` (their commit TS) and ``with_segment``'s segment."""
    return with_segment(changes.append_column("order_ts", changes.column("commit_ts")), barriers)


def with_segment(
    changes: pa.Table, barriers: Mapping[tuple[str, str], Sequence[int | None]]
) -> pa.Table | None:
    """Add ``segment``: how many of its table's barriers (with a TS) each change is at or
    after. None when a table's barriers are not in TS order."""
    barrier_ts = _barrier_ts(barriers)
    if barrier_ts is None:
        return None
    segment = np.zeros(changes.num_rows, np.int32)
    if barrier_ts:  # most runs fold every DDL: no change is after a barrier
        order_ts = _numpy(changes.column("order_ts"))
        rows = rows_by_table(changes)
        for name, known in barrier_ts.items():
            if name in rows:
                at = rows[name]
                segment[at] = np.searchsorted(known, order_ts[at], side="right")
    return changes.append_column("segment", pa.array(segment))


def _barrier_ts(
    barriers: Mapping[tuple[str, str], Sequence[int | None]],
) -> dict[tuple[str, str], np.ndarray] | None:
    """The TSs of each table's barriers that have one (tables with none left out); None when
    a table's are not in TS order."""
    found = {}
    for name, stamps in barriers.items():
        known = np.array([ts for ts in stamps if ts is not None], np.int64)
        if np.any(np.diff(known) < 0):
            return None
        if len(known):
            found[name] = known
    return found


def with_folds(
    changes: pa.Table, ranges: Sequence[FoldRange], *, reshaping: Sequence[FoldRange] | None = None
) -> pa.Table:
    """Carry out the folded DDLs (``fold_ranges``) on the changes before them
    (reduce.with_folds): drop the changes a reset discards; in the others' images (of those in
    ``reshaping`` of the ranges, if given) drop and rename columns (handle-key columns stay) and
    add the added ones after them, and rename their handle keys' columns."""
    if not ranges or not changes.num_rows:
        return changes
    fold = _fold_of(changes, ranges)
    discarded = _discarded(fold, ranges)
    if discarded.any():
        changes, fold = changes.filter(pa.array(~discarded)), fold[~discarded]
    if reshaping is not None:
        ranges, fold = reshaping, _fold_of(changes, reshaping)
    if not (fold >= 0).any():
        return changes
    handle = _one_chunk(changes.column("handle_key"))
    images = [_one_chunk(changes.column(name)) for name in ("columns", "old_columns")]
    renames = [
        name for fold_range in ranges for pair in fold_range.renamed.items() for name in pair
    ]
    names = _Names.of([*map(_flat_names, images), pc.list_flatten(handle)], renames)
    rules = _FoldRules.of(ranges, names)
    handles = _Handles.of(handle, names)
    refolded = {
        "columns": rules.refold(images[0], fold, handles, names),
        "old_columns": rules.refold(images[1], fold, handles, names),
        "handle_key": rules.rename_names(handle, fold, names),
    }
    for column, array in refolded.items():
        changes = changes.set_column(changes.schema.get_field_index(column), column, array)
    return changes


def _reshaped_before_and_after_keys(
    ranges: Sequence[FoldRange],
    changes: pa.Table,
    fallback_handles: Mapping[tuple[str, str], Sequence[str]],
) -> tuple[list[FoldRange], list[FoldRange]]:
    """The ranges whose images ``with_folds`` reshapes, and those whose drops and additions
    wait for the winners (``reshaped``): a table's ranges wait if its folds rename nothing and
    drop or add no column a handle names, so every image's key is the same before and after
    them. Most folds are an ALTER before which most changes lose to a later one of their key:
    their images need not be rebuilt."""
    if not ranges:
        return [], []
    name = IMAGE_FIELDS.index("name")
    handles = {column for handle in fallback_handles.values() for column in handle}
    handles |= set(pc.unique(pc.list_flatten(changes.column("handle_key"))).to_pylist())
    now = {
        (fold_range.schema, fold_range.table)
        for fold_range in ranges
        if fold_range.renamed
        or handles.intersection(fold_range.dropped, (e[name] for e in fold_range.added))
    }
    split = [(fold_range.schema, fold_range.table) in now for fold_range in ranges]
    return (
        [fold_range for fold_range, first in zip(ranges, split, strict=True) if first],
        [fold_range for fold_range, first in zip(ranges, split, strict=True) if not first],
    )


def reshaped(candidates: pa.Table, ranges: Sequence[FoldRange]) -> pa.Table:
    """Chunk winners (CANDIDATE_SCHEMA's columns) whose images ``with_folds`` did not reshape
    (of the ``ranges`` it was not given), as it would have: without their dropped columns and
    with the added ones."""
    if not ranges:
        return candidates
    fold = _fold_of(candidates, ranges)
    if not (fold >= 0).any():
        return candidates
    image, handle = (_one_chunk(candidates.column(name)) for name in ("image", "handle"))
    names = _Names.of([_flat_names(image), pc.list_flatten(handle)], [])
    image = _FoldRules.of(ranges, names).refold(image, fold, _Handles.of(handle, names), names)
    return candidates.set_column(candidates.schema.get_field_index("image"), "image", image)


def reset_discards(
    changes: pa.Table,
    barriers: Mapping[tuple[str, str], Sequence[int | None]],
    points: Mapping[SegmentKey, Sequence],
) -> np.ndarray | None:
    """Per change (silver's rows; schema, table and commit TS suffice) whether a folded reset
    (TRUNCATE) discards it, as ``with_folds`` does; None as ``reduce_chunk``."""
    ranges = fold_ranges(points)
    if not any(fold_range.reset for fold_range in ranges):  # no row need be placed
        return None if _barrier_ts(barriers) is None else np.zeros(changes.num_rows, bool)
    segmented = _segmented(changes, barriers)
    if segmented is None:
        return None
    return _discarded(_fold_of(segmented, ranges), ranges)


def _discarded(fold: np.ndarray, ranges: Sequence[FoldRange]) -> np.ndarray:
    # Fold -1 (in none) reads the False at the end.
    return np.array([fold_range.reset for fold_range in ranges] + [False])[fold]


@dataclass(frozen=True)
class Actions:
    """key_actions' rows: per action its change's row, whether it deletes, which image it
    upserts or deletes by (new: ``columns``), its key's code and ``sub``; and the changes, with
    ``handle`` added, and their images' keys as values."""

    changes: pa.Table
    row: np.ndarray
    deleted: np.ndarray
    new_image: np.ndarray
    key: np.ndarray
    sub: np.ndarray
    key_values: Sequence[pa.ListArray]  # per change, of each image (new, old): KEY_VALUES_TYPE


def key_actions(
    changes: pa.Table, fallback_handles: Mapping[tuple[str, str], Sequence[str]]
) -> Actions:
    """Each change as upserts and deletes keyed by its handle-key values (reduce.key_actions)."""
    handle = _handles(changes, fallback_handles)
    changes = changes.append_column("handle", handle)
    images = [_one_chunk(changes.column(name)) for name in ("columns", "old_columns")]
    names = _Names.of([*map(_flat_names, images), pc.list_flatten(handle)], [])
    (new_key, old_key), key_values = _key_codes(images, _Handles.of(handle, names), names)
    op = changes.column("op")
    deleting = _numpy(pc.equal(op, "delete"), fill=False)
    updating = _numpy(pc.equal(op, "update"), fill=False)
    key_changed = updating & (old_key >= 0) & (new_key >= 0) & (old_key != new_key)
    first_deletes = deleting | key_changed
    moved = np.flatnonzero(key_changed)
    count = changes.num_rows
    return Actions(
        changes,
        row=np.concatenate([np.arange(count), moved]),
        deleted=np.concatenate([first_deletes, np.zeros(len(moved), bool)]),
        new_image=np.concatenate([~first_deletes, np.ones(len(moved), bool)]),
        key=np.concatenate([np.where(first_deletes, old_key, new_key), new_key[moved]]),
        sub=np.concatenate([np.zeros(count, np.int8), np.ones(len(moved), np.int8)]),
        key_values=key_values,
    )


def winners(actions: Actions, *, replays: bool) -> np.ndarray:
    """The last action per (schema, table, segment, key), of the selected changes' if some
    are (``reduce_chunk``), copies of an event after its first dropped unless ``replays``
    (reduce.last_per_key): their numbers, by table and segment."""
    changes = actions.changes
    at = actions.row
    table = _table_codes(changes)[at]
    segment = _numpy(changes.column("segment"))[at]
    order_ts = _numpy(changes.column("order_ts"))[at]
    position = [column[at] for column in _position(changes)]
    key = (table, segment, actions.key)
    among = np.arange(len(at))
    if "selected" in changes.column_names:
        among = np.flatnonzero(_numpy(changes.column("selected"))[at])
    if replays:
        event = _codes(changes.column("event_id"))[at]
        copy = (*key, event, order_ts, actions.sub)
        order = among[_lexsort([column[among] for column in (*copy, *position)])]
        among = order[_firsts([column[order] for column in copy])]
    return _last_of(key, (order_ts, *position, actions.sub), among)


def first_copies(changes: pa.Table, event: np.ndarray) -> np.ndarray:
    """The numbers of the ``changes`` (silver's rows; ``event``: their ``event_codes``) that
    are not a copy of an event beyond its first (same table, event id and commit TS; later in
    Kafka): ``winners``' replays rule row by row, before the run's chunks are reduced without
    it. An event's id hashes its table, commit TS and images, so its copies' actions are the
    same actions."""
    copied = repeated(event)
    everyone = np.arange(changes.num_rows)
    if not len(copied):
        return everyone
    copies = changes.take(pa.array(copied))
    copy = (_table_codes(copies), event[copied], _numpy(copies.column("commit_ts")))
    order = _lexsort((*copy, *_position(copies)))
    later = np.ones(len(copied), bool)
    later[order[_firsts([column[order] for column in copy])]] = False
    return np.delete(everyone, copied[later])


def repeated(codes: np.ndarray) -> np.ndarray:
    """The numbers of the rows whose (non-negative) code another row shares."""
    return np.flatnonzero(np.bincount(codes, minlength=1)[codes] > 1)


def event_codes(ids) -> np.ndarray:
    """A code per event id, equal ids equal codes; 0 for no id (as Spark groups nulls)."""
    ids = _one_chunk(ids)
    hashes = _id_hashes(ids)
    if hashes is None:
        return _codes(ids) + 1
    codes = np.unique(hashes, return_inverse=True)[1].reshape(-1).astype(np.int64) + 1
    shared = repeated(codes)  # ids whose hash another id has: their whole ids decide
    if len(shared):
        codes[shared] = codes.max() + 1 + _codes(ids.take(pa.array(shared)))
    return codes


ID_LENGTH = 32  # silver's event ids: a 16-byte BLAKE2b digest in hex
_MIX = np.array([1, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], np.uint64)


def _id_hashes(ids: pa.Array) -> np.ndarray | None:
    """A 64-bit hash of each event id, read straight from the string buffer; None unless every
    id is as long as silver writes them (dictionary-encoding the ids took half a second per
    million)."""
    if not pa.types.is_string(ids.type) or ids.null_count or not len(ids):
        return None
    _, offsets, data = ids.buffers()
    offsets = np.frombuffer(offsets, np.int32)[ids.offset : ids.offset + len(ids) + 1]
    if np.any(np.diff(offsets) != ID_LENGTH):
        return None
    words = np.frombuffer(data, np.uint64, len(ids) * 4, int(offsets[0])).reshape(-1, 4)
    return np.bitwise_xor.reduce(words * _MIX, axis=1)


def _last_of(
    key: Sequence[np.ndarray], ranked: Sequence[np.ndarray], among: np.ndarray
) -> np.ndarray:
    """Of the rows ``among``, the last by ``ranked`` per ``key``."""
    order = among[_lexsort([column[among] for column in (*key, *ranked)])]
    return order[_lasts([column[order] for column in key])]


def _position(rows: pa.Table) -> list[np.ndarray]:
    """Each row's place in Kafka, as columns to sort by: topic, partition, offset, index."""
    numbers = (_numpy(rows.column(name)) for name in ("partition", "offset", "index"))
    return [_sorted_codes(rows.column("topic")), *numbers]


# --- names and handles ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Names:
    """One code per distinct column name of a run's images, handles and renames."""

    dictionary: pa.Array
    index: dict[str, int]

    @classmethod
    def of(cls, arrays: Sequence[pa.Array], extra: Sequence[str]) -> _Names:
        distinct = [array.dictionary if _encoded(array) else array for array in arrays]
        every = pa.chunked_array([*distinct, pa.array(extra, pa.string())], pa.string())
        dictionary = pc.unique(every)
        return cls(dictionary, {name: code for code, name in enumerate(dictionary.to_pylist())})

    @property
    def size(self) -> int:
        return len(self.dictionary)

    def codes(self, names: pa.Array) -> np.ndarray:
        if not _encoded(names):
            return _numpy(pc.index_in(names, value_set=self.dictionary), fill=-1)
        # Read as Parquet holds them (RowGroups.read): a code per entry of their dictionary.
        by_entry = np.append(self.codes(names.dictionary), -1)
        return by_entry[_numpy(names.indices, fill=-1)]

    def encoded(self, codes: np.ndarray, like: pa.Array) -> pa.Array:
        """The names of ``codes``, encoded as ``like`` is."""
        if _encoded(like):
            return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), self.dictionary)
        return pc.take(self.dictionary, pa.array(codes))

    def code(self, name: str) -> int | None:
        return self.index.get(name)


# A handle key of more columns than this is matched by sorting, not column by column.
_WIDE_HANDLE = 8


@dataclass(frozen=True)
class _Handles:
    """Each row's handle-key columns: their name codes side by side, padded with -2 (rows,
    widest handle); or, for handles wider than _WIDE_HANDLE, (row, code) pairs."""

    codes: np.ndarray | None
    pairs: np.ndarray | None  # row * size + code
    size: int

    @classmethod
    def of(cls, lists: pa.ListArray, names: _Names) -> _Handles:
        lengths = _numpy(pc.list_value_length(lists), fill=0)
        parent = _numpy(pc.list_parent_indices(lists))
        codes = names.codes(pc.list_flatten(lists))
        width, size = int(lengths.max(initial=0)), names.size + 1
        if width > _WIDE_HANDLE:
            return cls(None, parent * size + codes, size)
        side_by_side = np.full((len(lists), width), -2, np.int64)
        side_by_side[parent, np.arange(len(parent)) - _starts(lengths)[parent]] = codes
        return cls(side_by_side, None, size)

    def holds(self, parent: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Whether the handle of row ``parent`` holds the column ``codes``, per element."""
        if self.codes is None:
            return np.isin(parent * self.size + codes, self.pairs)
        held = np.zeros(len(parent), bool)
        for column in range(self.codes.shape[1]):
            held |= self.codes[parent, column] == codes
        return held


def _handles(
    changes: pa.Table, fallback_handles: Mapping[tuple[str, str], Sequence[str]]
) -> pa.ListArray:
    """Per change its handle key, or the one the DDL log implies for its table, or []."""
    own = _one_chunk(changes.column("handle_key"))
    has_own = _numpy(pc.list_value_length(own), fill=0) > 0
    if has_own.all():
        return own
    fallback = np.zeros(changes.num_rows, np.int64)  # 0: the empty handle
    implied = [[]]
    for name, at in rows_by_table(changes).items():
        handle = fallback_handles.get(name)
        if handle:
            implied.append(list(handle))
            fallback[at] = len(implied) - 1
    choices = pa.concat_arrays([own, pa.array(implied, own.type)])
    pick = np.where(has_own, np.arange(changes.num_rows), changes.num_rows + fallback)
    return choices.take(pa.array(pick))


def _key_codes(
    images: Sequence[pa.ListArray], handles: _Handles | None, names: _Names
) -> tuple[list[np.ndarray], list[pa.ListArray]]:
    """Per image, per row a code of its handle-key values (its handle columns' names, texts
    and binaries): equal values, equal codes, across the images; -1 for a null image. And the
    values, as KEY_VALUES_TYPE. No ``handles``: every column of the images is a key column
    (the images are key values already)."""
    rows = len(images[0])
    image, owner, name, texts, binaries, values = [], [], [], [], [], []
    for number, array in enumerate(images):
        parent = _numpy(pc.list_parent_indices(array))
        elements = pc.list_flatten(array)
        codes = names.codes(pc.struct_field(elements, "name"))
        if handles is None:  # the images are KEY_VALUES_TYPE already: nothing to copy
            chosen = np.arange(len(codes))
            taken = [pc.struct_field(elements, field) for field in _KEY_FIELDS]
            values.append(array)
        else:
            chosen = np.flatnonzero(handles.holds(parent, codes))
            taken = [
                _decoded(pc.struct_field(elements, field).take(pa.array(chosen)))
                for field in _KEY_FIELDS
            ]
            fields = pa.StructArray.from_arrays(taken, fields=list(KEY_VALUES_TYPE.value_type))
            counts = np.bincount(parent[chosen], minlength=rows)
            values.append(_list_of(fields, counts, _numpy(array.is_valid()), KEY_VALUES_TYPE))
        image.append(np.full(len(chosen), number, np.int64))
        owner.append(parent[chosen])
        name.append(codes[chosen])
        texts.append(taken[1])
        binaries.append(taken[2])
    image, owner, name = map(np.concatenate, (image, owner, name))
    text = _codes(pa.chunked_array(texts, pa.string()))
    binary = _codes(pa.chunked_array(binaries, pa.binary()))
    value = _codes(pa.array((text + 1) * (binary.max(initial=-1) + 2) + binary + 1))
    element = value * (names.size + 1) + name
    # In name order within each image: the key is the set of its columns' values.
    order = _lexsort((image, owner, name))
    image, owner, element = image[order], owner[order], element[order]
    slot = image * rows + owner
    sizes = np.bincount(slot, minlength=len(images) * rows)
    keys = np.full(len(images) * rows, -1, np.int64)
    single = sizes == 1
    keys[single] = element[_starts(sizes)[single]]
    top = int(element.max(initial=-1)) + 1
    keys[sizes == 0] = top  # no handle column in the image: the empty key
    wider = np.unique(sizes[sizes > 1])
    for width in wider:
        # Images with as many handle columns: their elements side by side, one row each.
        slots = np.flatnonzero(sizes == width)
        starts = _starts(sizes)[slots]
        matrix = element[starts[:, None] + np.arange(width)]
        keys[slots] = top + 1 + _row_codes(matrix)
        top = int(keys[slots].max()) + 1
    for number, array in enumerate(images):
        keys[number * rows : (number + 1) * rows][~_numpy(array.is_valid())] = -1
    codes = [keys[number * rows : (number + 1) * rows] for number in range(len(images))]
    return codes, values


_KEY_FIELDS = ("name", "text", "binary")


# --- folds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FoldRules:
    """The fold ranges' drops and renames as sorted (range, name code) pairs, and the
    elements they add."""

    dropped: np.ndarray
    renamed_from: np.ndarray
    renamed_to: np.ndarray
    added: pa.StructArray  # every range's added elements, range after range
    added_start: np.ndarray  # per range, where its added elements start in ``added``
    added_count: np.ndarray

    @classmethod
    def of(cls, ranges: Sequence[FoldRange], names: _Names) -> _FoldRules:
        size = names.size + 1
        dropped = [
            number * size + code
            for number, fold_range in enumerate(ranges)
            for code in map(names.code, fold_range.dropped)
            if code is not None
        ]
        renames = sorted(
            (number * size + names.code(old), names.code(new))
            for number, fold_range in enumerate(ranges)
            for old, new in fold_range.renamed.items()
        )
        elements = [element for fold_range in ranges for element in fold_range.added]
        counts = np.array([len(fold_range.added) for fold_range in ranges], np.int64)
        added = pa.array([dict(zip(IMAGE_FIELDS, e, strict=True)) for e in elements], COLUMN_TYPE)
        return cls(
            dropped=np.array(sorted(dropped), np.int64),
            renamed_from=np.array([pair[0] for pair in renames], np.int64),
            renamed_to=np.array([pair[1] for pair in renames], np.int64),
            added=added,
            added_start=_starts(counts),
            added_count=counts,
        )

    def renamed(self, pairs: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The name code now of each (range, name code) pair (``pairs``) of names ``codes``."""
        if not len(self.renamed_from):
            return codes
        found = np.minimum(np.searchsorted(self.renamed_from, pairs), len(self.renamed_from) - 1)
        return np.where(self.renamed_from[found] == pairs, self.renamed_to[found], codes)

    def refold(
        self, images: pa.ListArray, fold: np.ndarray, handles: _Handles, names: _Names
    ) -> pa.ListArray:
        """Each image of a change in a fold range (``fold``: its range, or -1) without its
        dropped columns (handle-key columns stay), its columns renamed, and the added columns
        after them; a null image stays null."""
        size = names.size + 1
        parent = _numpy(pc.list_parent_indices(images))
        elements = pc.list_flatten(images)
        codes = names.codes(pc.struct_field(elements, "name"))
        folded = fold[parent] >= 0
        pairs = np.where(folded, fold[parent] * size + codes, -1)
        kept = ~np.isin(pairs, self.dropped) | handles.holds(parent, codes)
        renamed = self.renamed(pairs, codes)
        valid = _numpy(images.is_valid())
        counts = np.where(valid & (fold >= 0), self.added_count[fold], 0)
        if kept.all() and (renamed == codes).all() and not counts.any():
            return images
        # Folds that only add columns (the common ALTER TABLE) copy no element's fields here.
        fields = {field.name: pc.struct_field(elements, field.name) for field in elements.type}
        if not kept.all():
            mask = pa.array(kept)
            fields = {name: array.filter(mask) for name, array in fields.items()}
        if (renamed != codes).any():
            fields["name"] = names.encoded(renamed[kept], fields["name"])
        values = pa.StructArray.from_arrays(list(fields.values()), fields=list(elements.type))
        kept_counts = np.bincount(parent[kept], minlength=len(images))
        if counts.any():
            values = self._with_added(values, parent[kept], kept_counts, fold, counts)
        return _list_of(values, kept_counts + counts, valid, images.type)

    def _with_added(self, values, owners, kept_counts, fold, counts) -> pa.StructArray:
        """``values`` (each image's kept columns, image after image) with each image's added
        columns after its own."""
        starts = _starts(kept_counts + counts)
        kept_at = starts[owners] + np.arange(len(owners)) - _starts(kept_counts)[owners]
        added_owners = np.repeat(np.arange(len(counts)), counts)
        rank = np.arange(len(added_owners)) - _starts(counts)[added_owners]
        added_at = starts[added_owners] + kept_counts[added_owners] + rank
        source = self.added_start[fold[added_owners]] + rank
        order = np.empty(len(owners) + len(added_owners), np.int64)
        order[kept_at] = np.arange(len(owners))
        order[added_at] = len(owners) + np.arange(len(added_owners))
        added = self.added.take(pa.array(source)).cast(values.type)
        return pa.concat_arrays([values, added]).take(pa.array(order))

    def rename_names(self, lists: pa.ListArray, fold: np.ndarray, names: _Names) -> pa.ListArray:
        """Each handle key of a change in a fold range with its renamed columns' names now."""
        if not len(self.renamed_from):
            return lists
        size = names.size + 1
        parent = _numpy(pc.list_parent_indices(lists))
        codes = names.codes(pc.list_flatten(lists))
        pairs = np.where(fold[parent] >= 0, fold[parent] * size + codes, -1)
        renamed = self.renamed(pairs, codes)
        if (renamed == codes).all():
            return lists
        values = pc.take(names.dictionary, pa.array(renamed))
        lengths = _numpy(pc.list_value_length(lists), fill=0)
        return _list_of(values, lengths, _numpy(lists.is_valid()), lists.type)


def _fold_of(changes: pa.Table, ranges: Sequence[FoldRange]) -> np.ndarray:
    """Per change the index of the fold range it is in, or -1."""
    fold = np.full(changes.num_rows, -1, np.int64)
    order_ts = _numpy(changes.column("order_ts"))
    segment = _numpy(changes.column("segment"))
    rows = rows_by_table(changes)
    segments: dict[SegmentKey, list[int]] = {}
    for number, fold_range in enumerate(ranges):
        segments.setdefault((fold_range.schema, fold_range.table, fold_range.segment), []).append(
            number
        )
    for (schema, table, number), in_segment in segments.items():
        at = rows.get((schema, table))
        if at is None:
            continue
        at = at[segment[at] == number]
        # A segment's ranges are disjoint and in TS order: each change is in the first one
        # ending after its TS, if it starts at or before it.
        in_segment = sorted(in_segment, key=lambda n: ranges[n].high)
        highs = np.array([ranges[n].high for n in in_segment], np.int64)
        lows = np.array([_NO_LOW if ranges[n].low is None else ranges[n].low for n in in_segment])
        ts = order_ts[at]
        found = np.searchsorted(highs, ts, side="right")
        inside = found < len(highs)
        found = np.minimum(found, len(highs) - 1)
        inside &= ts >= lows[found]
        fold[at[inside]] = np.array(in_segment, np.int64)[found[inside]]
    return fold


_NO_LOW = np.iinfo(np.int64).min


# --- the winners ---------------------------------------------------------------------------


def candidates_of(
    actions: Actions, chosen: np.ndarray, reshaping: Sequence[FoldRange] = ()
) -> pa.Table:
    """CANDIDATE_SCHEMA's rows of the ``chosen`` actions, their images ``reshaped`` by the
    fold ranges ``reshaping``."""
    changes = actions.changes
    parts = []
    for new_image in (True, False):
        part = chosen[actions.new_image[chosen] == new_image]
        image = "columns" if new_image else "old_columns"
        wanted = [image if name == "image" else name for name in CANDIDATE_SCHEMA.names]
        own = [name for name in wanted if name not in ("deleted", "sub", "key_values")]
        rows = pa.array(actions.row[part])
        taken = changes.select(own).take(rows)
        taken = taken.rename_columns(
            ["image" if name == image else name for name in taken.column_names]
        )
        taken = taken.append_column("deleted", pa.array(actions.deleted[part]))
        taken = taken.append_column("sub", pa.array(actions.sub[part], pa.int8()))
        taken = taken.append_column(
            "key_values", actions.key_values[0 if new_image else 1].take(rows)
        )
        # Reshaped before the cast: names read dictionary-encoded are coded by dictionary.
        taken = reshaped(taken, reshaping)
        parts.append(taken.select(CANDIDATE_SCHEMA.names).cast(CANDIDATE_SCHEMA))
    return pa.concat_tables(parts)


def by_segment(candidates: pa.Table) -> dict[SegmentKey, pa.Table]:
    """REDUCED_SCHEMA's rows of ``candidates`` by segment. Rows of a segment that lie together
    are sliced, not copied: ``winners`` ranks by table and segment first, so a chunk's winners
    lie in two runs per segment (its upserts', its deletes')."""
    table, segment = _table_codes(candidates), _numpy(candidates.column("segment"))
    rows = candidates.select(REDUCED_SCHEMA.names)
    runs = _runs(table, segment)
    if len(runs) > 2 * len(np.unique(table * (segment.max(initial=0) + 1) + segment)):
        order = _lexsort((table, segment))
        rows, table, segment = rows.take(pa.array(order)), table[order], segment[order]
        runs = _runs(table, segment)
    found: dict[SegmentKey, list[pa.Table]] = {}
    for start, stop in runs:
        part = rows.slice(start, stop - start)
        key = (part["schema"][0].as_py(), part["table"][0].as_py(), int(segment[start]))
        found.setdefault(key, []).append(part)
    return {key: pa.concat_tables(parts) for key, parts in found.items()}


# --- codes and arrays ----------------------------------------------------------------------


def _numpy(values, fill=None) -> np.ndarray:
    values = _one_chunk(values)
    if fill is not None:
        values = pc.fill_null(values, fill)
    return values.to_numpy(zero_copy_only=False)


def _one_chunk(values) -> pa.Array:
    if not isinstance(values, pa.ChunkedArray):
        return values
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def _codes(values) -> np.ndarray:
    """A code per value, equal values equal codes; -1 for null."""
    encoded = pc.dictionary_encode(_one_chunk(values))
    return _numpy(encoded.indices, fill=-1).astype(np.int64)


def _sorted_codes(values) -> np.ndarray:
    """Codes in the values' order (for sorting by a string column)."""
    encoded = pc.dictionary_encode(_one_chunk(values))
    rank = np.empty(len(encoded.dictionary), np.int64)
    rank[_numpy(pc.sort_indices(encoded.dictionary))] = np.arange(len(encoded.dictionary))
    return rank[_numpy(encoded.indices, fill=0)]


def _table_codes(changes: pa.Table) -> np.ndarray:
    """A code per (schema, table)."""
    tables = _codes(changes.column("table"))
    return _codes(changes.column("schema")) * (tables.max(initial=-1) + 2) + tables + 1


def rows_by_table(changes: pa.Table) -> dict[tuple[str, str], np.ndarray]:
    """The row numbers of each (schema, table)."""
    codes = _table_codes(changes)
    order = np.argsort(codes, kind="stable")
    schema, table = changes.column("schema"), changes.column("table")
    found = {}
    for start, stop in _runs(codes[order]):
        rows = order[start:stop]
        first = int(rows[0])
        found[(schema[first].as_py(), table[first].as_py())] = rows
    return found


def _flat_names(images: pa.ListArray) -> pa.Array:
    return pc.struct_field(pc.list_flatten(images), "name")


def _encoded(values: pa.Array) -> bool:
    return pa.types.is_dictionary(values.type)


def _decoded(values: pa.Array) -> pa.Array:
    return values.cast(values.type.value_type) if _encoded(values) else values


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.cumsum(counts) - counts


def _list_of(values: pa.Array, counts: np.ndarray, valid: np.ndarray, kind) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=kind, mask=pa.array(~valid))


def _lexsort(columns: Sequence[np.ndarray]) -> np.ndarray:
    """The order sorting by ``columns``, the first first (stably). Neighbouring integer columns
    whose ranges fit one int64 together are sorted as one number: np.lexsort sorts once per
    column it is given (nine columns shaped like a reduce's ranking, 560k rows of random
    values: 0.15 against 0.31 s)."""
    keys = _packed(columns)
    if len(keys) == 1:
        return np.argsort(keys[0], kind="stable")
    return np.lexsort(tuple(reversed(keys)))


_INT64_VALUES = 2**63  # how many values an int64 holds from 0 up


def _packed(columns: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``columns`` as fewer keys that sort alike: a run of integer columns as one int64, each
    column a digit of it, counted from the column's least value."""
    keys: list[np.ndarray] = []
    values = 0  # how many values the last key takes; 0: it takes no more digits
    for column in columns:
        if column.dtype.kind == "b":
            column = column.view(np.uint8)
        width = _width(column)
        if width is None:
            keys.append(column)
            values = 0
        elif values and values * width < _INT64_VALUES:
            keys[-1] = keys[-1] * width + _digits(column)
            values *= width
        else:
            keys.append(_digits(column))
            values = width
    return keys


def _digits(column: np.ndarray) -> np.ndarray:
    # Exact: each difference is below 2^63, and wraps around to it where int64 overflows.
    return (column - column.dtype.type(column.min())).astype(np.int64)


def _width(column: np.ndarray) -> int | None:
    """How many values ``column``'s range spans, when it is of integers and below 2^63."""
    if column.dtype.kind not in "iu" or not len(column):
        return None
    width = int(column.max()) - int(column.min()) + 1
    return width if width < _INT64_VALUES else None


def _row_codes(matrix: np.ndarray) -> np.ndarray:
    """A code per row of ``matrix`` (non-negative integers), equal rows equal codes, numbered
    in the rows' sorted order: ``np.unique(matrix, axis=0, return_inverse=True)``'s inverse,
    which sorts the rows as opaque bytes and took a tenth of compaction."""
    top = int(matrix.max(initial=0)) + 1
    if top ** matrix.shape[1] < 2**63:  # the row as one number, its columns its digits
        combined = np.zeros(len(matrix), np.int64)
        for column in matrix.T:
            combined = combined * top + column
        return np.unique(combined, return_inverse=True)[1]
    order = _lexsort(list(matrix.T))
    new_row = np.zeros(len(matrix), np.int64)
    new_row[_firsts(list(matrix[order].T))] = 1
    codes = np.empty(len(matrix), np.int64)
    codes[order] = np.cumsum(new_row) - 1
    return codes


def _firsts(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Where each run of equal rows (over ``columns``, sorted) starts."""
    if not len(columns[0]):
        return np.zeros(0, np.int64)
    change = np.zeros(len(columns[0]), bool)
    change[0] = True
    for column in columns:
        change[1:] |= column[1:] != column[:-1]
    return np.flatnonzero(change)


def _lasts(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Where each run of equal rows (over ``columns``, sorted) ends."""
    if not len(columns[0]):
        return np.zeros(0, np.int64)
    return np.append(_firsts(columns)[1:] - 1, len(columns[0]) - 1)


def _runs(*columns: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal rows over ``columns`` (sorted)."""
    if not len(columns[0]):
        return []
    starts = _firsts(columns)
    return list(zip(starts.tolist(), [*starts[1:].tolist(), len(columns[0])], strict=True))
