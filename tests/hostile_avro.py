"""Hostile Avro writer schemas and records, as a rogue registry or producer could send them.

Each crashed or exhausted the decoder before the schema check (issue 7): a record type that
contains itself, read from a record nested thousands of levels deep, crashed the process in
fastavro's C recursion; an array or map block claiming 2^40 items of `null` (which take no
bytes) made it loop and grow without end.
"""

from __future__ import annotations

import json
import struct

NAMESPACE = "default.shop"


def zigzag(number: int) -> bytes:
    """An Avro long: zigzag, then little-endian base-128 groups."""
    encoded = (number << 1) ^ (number >> 63)
    out = bytearray()
    while encoded >= 0x80:
        out.append(encoded & 0x7F | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + body


def nested_schema(depth: int) -> dict:
    """A record whose types nest `depth` levels: depth - 1 records, the innermost holding a
    long (the schema check counts the long as a level too)."""
    avro_type: object = "long"
    for level in range(depth - 1, 1, -1):
        avro_type = {"type": "record", "name": f"level{level}", "fields": [_field(avro_type)]}
    return _table([_field(avro_type)])


def nested_schema_text(depth: int) -> str:
    """`nested_schema(depth)` as JSON text, written directly: json.dumps recurses too deep."""
    opening = "".join(
        f'{{"type": "record", "name": "level{level}", "fields": [{{"name": "x", "type": '
        for level in range(2, depth)
    )
    closing = "}]}" * (depth - 2)
    return json.dumps(_table([_field("PLACEHOLDER")])).replace(
        '"PLACEHOLDER"', opening + '"long"' + closing
    )


def nested_record() -> bytes:
    """A record of any `nested_schema`: records are just their fields, so one long."""
    return zigzag(7)


def recursive_schema() -> dict:
    """A linked list: the record `t` holds a long and an optional `t`."""
    return _table([_field("long", "value"), _field(["null", "t"], "next")])


def recursive_record(depth: int) -> bytes:
    """A record of `recursive_schema()` nested `depth` levels."""
    return (zigzag(1) + b"\x02") * (depth - 1) + zigzag(1) + b"\x00"


def collection_schema(kind: str) -> dict:
    """A record holding an array or a map of nulls: items that take no bytes at all."""
    collection = {"type": "array", "items": "null"} if kind == "array" else {
        "type": "map", "values": "null"
    }  # fmt: skip
    return _table([_field(collection, "items")])


def count_bomb(count: int) -> bytes:
    """A record of `collection_schema("array")` whose one block claims `count` items (a
    negative count is followed by the block's byte size, as Avro writes it)."""
    size = zigzag(0) if count < 0 else b""
    return zigzag(count) + size + zigzag(0)


def _table(fields: list[dict]) -> dict:
    return {"type": "record", "name": "t", "namespace": NAMESPACE, "fields": fields}


def _field(avro_type: object, name: str = "x") -> dict:
    return {"name": name, "type": avro_type}


def huge_bit_schema() -> dict:
    """A table of an id and a BIT column (TiCDC's BIT holds at most 64 bits)."""
    bigint = {"type": "long", "connect.parameters": {"tidb_type": "BIGINT"}}
    bit = {"type": "bytes", "connect.parameters": {"tidb_type": "BIT", "length": "64"}}
    return _table([_field(bigint, "id"), _field(bit, "flags"), _field("string", "_tidb_op")])


def huge_bit_record(size: int = 4096) -> bytes:
    """An insert of `huge_bit_schema()` whose BIT is `size` bytes: an integer of more digits
    than Python turns into text (4,300), so its silver row could not be built."""
    return zigzag(1) + zigzag(size) + b"\xff" * size + zigzag(1) + b"c"
