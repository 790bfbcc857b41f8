"""Bronze's ``record_hash`` computed in Python, equal to the one Spark computes
(``land_batch.with_record_hash``): land's pass reads the export files in the tasks that write
bronze, where no Spark expression runs, and a record landed either way must hash alike, since
later batches compare their copies with bronze's by it."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

SEED = 42  # Spark's xxhash64 seed
# Spark hashes a boolean as the int 1 or 0: four bytes, little-endian.
_TRUE, _FALSE = (1).to_bytes(4, "little"), (0).to_bytes(4, "little")
_hash = xxhash.xxh64_intdigest
_NULL_KEY, _KEY_PRESENT = _hash(_TRUE, SEED), _hash(_FALSE, SEED)
_BYTE_HEADERS = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))


def record_hashes(keys: pa.Array, values: pa.Array, headers: pa.Array) -> pa.Array:
    """Spark's ``xxhash64(key IS NULL, key, value IS NULL, value, headers)`` of each row
    (int64): each non-null input, and each non-null element and field of the headers, hashed
    in turn with the hash so far as the seed."""
    found = []
    headers_of = _headers(headers)
    for key, value, pairs in zip(_bytes(keys), _bytes(values), headers_of, strict=True):
        seed = _NULL_KEY if key is None else _hash(key, _KEY_PRESENT)
        seed = _hash(_TRUE, seed) if value is None else _hash(value, _hash(_FALSE, seed))
        for pair in pairs or ():
            if pair is None:
                continue
            if pair["key"] is not None:
                seed = _hash(pair["key"], seed)
            if pair["value"] is not None:
                seed = _hash(pair["value"], seed)
        found.append(seed)
    return pa.array(np.array(found, np.uint64).view(np.int64), pa.int64())


def _bytes(array: pa.Array) -> list[memoryview | None]:
    """Each row's bytes, as a view of the array's buffer (no copy), None for a null."""
    if array.null_count == len(array):
        return [None] * len(array)
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets, data = array.buffers()
    ends = np.frombuffer(offsets, width)[array.offset : array.offset + len(array) + 1].tolist()
    data = memoryview(data) if data is not None else memoryview(b"")
    if array.null_count == 0:
        return [data[start:end] for start, end in itertools.pairwise(ends)]
    valid = array.is_valid().to_numpy(zero_copy_only=False).tolist()
    return [
        data[start:end] if ok else None
        for (start, end), ok in zip(itertools.pairwise(ends), valid, strict=True)
    ]


def _headers(headers: pa.Array) -> list | tuple:
    """Each row's headers as dicts of bytes; rows of none (nearly always all of them) as
    None. Keys as bytes: Spark hashes a string's bytes, valid UTF-8 or not, where Python
    would refuse to decode them."""
    lengths = pc.list_value_length(headers)
    if not pc.max(lengths).as_py():
        return (None,) * len(headers)
    return headers.cast(_BYTE_HEADERS).to_pylist()
