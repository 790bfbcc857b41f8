"""What the real kcat (Debian's 1.7.1, librdkafka 2.0.2) writes with ``-C -J`` for bytes that are
not text, checked against the session's Kafka broker, and that the export reader gets every byte
back exactly.

kcat puts key, payload and header values into its JSON as they are: control characters
(below 0x20) escaped as ``\\u00XX`` (``\\n``, ``\\t`` ... where JSON has them), ``"`` and ``\\``
escaped, and every other byte written raw, 0x7F and 0x80-0xFF included, so a line holding
binary data is not valid UTF-8 (nor strictly JSON). Nothing is lost: ``null`` and ``""`` stay
apart for keys, payloads and header values. The reader parses such a line with the raw bytes
carried as surrogate escapes and turns them back into the same bytes.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import Producer
from ticdc_lake.bronze import exports

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOPIC = "kcat-bytes"
EVERY_BYTE = bytes(range(256))
# (key, value, headers): every byte value, malformed UTF-8 of each kind, text, null and empty.
RECORDS = [
    (None, EVERY_BYTE, [("every-byte", EVERY_BYTE)]),
    (EVERY_BYTE[::-1], b"", [("null", None), ("empty", b"")]),
    (b"", None, []),
    (b"\x80", b"\xed\xa0\x80\xed\xb0\x80", [("surrogates", b"\xed\xa0\x80")]),  # CESU-8
    (b"\xc0\xaf", b"\xf4\x90\x80\x80", [("overlong", b"\xc0\xaf")]),  # past U+10FFFF
    (b"\xe2\x82", b"\xe2\x82\xac\xe2\x82", []),  # a sequence cut off
    ("schlüssel".encode(), 'text "quoted" \\ \u00ff \U0001f600 \\u00ff'.encode(), []),
    (b"\x00", b"\x7f\x00\x1f\x20", [("control", b"\x01\x02\n\r\t\x08\x0c")]),
]


@pytest.fixture(scope="module")
def kcat_output(kafka_broker, kcat) -> bytes:
    kafka_broker.create_topic(TOPIC, 1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for key, value, headers in RECORDS:
        producer.produce(TOPIC, value=value, key=key, headers=headers, timestamp=1_700_000_000_000)
    assert producer.flush(30) == 0
    command = [kcat, "-C", "-J", "-e", "-q", "-b", kafka_broker.bootstrap, "-t", TOPIC]
    return subprocess.run(command, capture_output=True, check=True, timeout=60).stdout


def test_kcat_writes_bytes_that_are_not_text_raw(kcat_output):
    lines = kcat_output.splitlines()
    assert len(lines) == len(RECORDS)
    first = lines[0]
    # Control characters escaped (uppercase hex), everything from 0x7F up written as it is.
    assert b"\\u0000\\u0001" in first and b'\\u001F !\\"#' in first
    assert bytes(range(0x7F, 0x100)) in first
    with pytest.raises(UnicodeDecodeError):
        first.decode("utf-8")
    # Null and empty stay apart.
    second = json.loads(lines[1].decode("utf-8", "surrogateescape"))
    assert (second["payload"], second["headers"]) == ("", ["null", None, "empty", ""])
    third = json.loads(lines[2])
    assert (third["key"], third["payload"]) == ("", None)


def test_the_reader_gets_every_byte_back(kcat_output, tmp_path):
    path = tmp_path / "bytes.kcat.jsonl"
    path.write_bytes(kcat_output)
    errors = []
    read = list(exports.read_export(path, on_error=errors.append))
    assert not errors
    for record, (key, value, headers) in zip(read, RECORDS, strict=True):
        assert (record.key, record.value, list(record.headers)) == (key, value, headers)
        assert (record.timestamp_ms, record.timestamp_type) == (1_700_000_000_000, 0)
    # Our own kcat-like writer (the generator's) gives records the reader reads the same.
    imitation = tmp_path / "imitation.kcat.jsonl"
    exports.write_export(imitation, read, "kcat")
    assert list(exports.read_export(imitation)) == read
