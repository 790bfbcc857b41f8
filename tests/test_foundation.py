"""The shared pieces every protocol builds on: errors, compression, claim-check, registry."""

from __future__ import annotations

import pytest
from ticdc_lake.compression import compress, decompress
from ticdc_lake.errors import ClaimCheckError, ConfigError, DecodeError
from ticdc_lake.limits import Limits
from ticdc_lake.protocols import CodecSettings, make_decoder
from ticdc_lake.silver.claimcheck import ClaimCheckStore
from ticdc_lake.silver.events import Column, RowEvent, to_json_dict
from ticdc_lake.silver.mysql import FLAG_BINARY, FLAG_HANDLE_KEY, TYPE_LONG, TYPE_VARCHAR, float32


@pytest.mark.parametrize("codec", ["none", "snappy", "lz4"])
def test_compression_round_trips(codec):
    payload = b'{"u":{"a":{"t":3,"f":11,"v":1}}}' * 20
    assert decompress(codec, compress(codec, payload), Limits()) == payload


def test_lz4_magic_is_the_frame_format():
    assert compress("lz4", b"x")[:4] == b"\x04\x22\x4d\x18"


def test_wrong_codec_names_the_likely_cause():
    with pytest.raises(DecodeError, match="plain JSON"):
        decompress("snappy", b'{"not": "compressed"}' * 3, Limits())


def test_unknown_codec_is_a_config_error():
    with pytest.raises(ConfigError, match="zstd"):
        CodecSettings(compression="zstd")


def test_unknown_protocol_is_a_config_error():
    with pytest.raises(ConfigError, match="open-protocol"):
        make_decoder("protobuf")


def test_claim_check_reads_only_under_its_roots(tmp_path):
    root = tmp_path / "claims"
    store = ClaimCheckStore([f"file://{root}"])
    location = store.store(b"key", b"value")
    assert location.startswith(f"file://{root}/")
    assert store.fetch(location) == (b"key", b"value")
    outside = tmp_path / "secret.json"
    outside.write_text('{"key": null, "value": ""}')
    for sneaky in (f"file://{outside}", f"file://{root}/../secret.json", str(outside)):
        with pytest.raises(ClaimCheckError, match="outside the configured storage roots"):
            store.read(sneaky)


def test_decode_error_names_where():
    error = DecodeError("truncated key", byte_offset=8).located(
        protocol="open-protocol", topic="t", partition=2, offset=41, byte_offset=99
    )
    assert str(error) == "open-protocol: truncated key (topic t, partition 2, offset 41, byte 8)"


def test_float32_rounding_is_stable():
    assert float32(3.14) == 3.140000104904175
    assert float32(float32(3.14)) == float32(3.14)


def test_event_json_is_lossless():
    event = RowEvent(
        commit_ts=2**63 + 5,
        schema="s",
        table="t",
        op="insert",
        columns={
            "id": Column(TYPE_LONG, FLAG_HANDLE_KEY, 2**64 - 1),
            "raw": Column(TYPE_VARCHAR, FLAG_BINARY, b"\x00\xff"),
        },
        old_columns=None,
        topic="topic",
        partition=0,
        offset=7,
    )
    out = to_json_dict(event)
    assert out["columns"] == {"id": 2**64 - 1, "raw": {"base64": "AP8="}}
    assert out["handle_key"] == ["id"]
    assert out["commit_ts"] == 2**63 + 5
