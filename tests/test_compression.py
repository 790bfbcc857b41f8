"""Value decompression is capped at limits.max_message_bytes before the output is made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import cramjam
import pytest
from ticdc_lake.compression import compress, decompress
from ticdc_lake.errors import DecodeError
from ticdc_lake.limits import MIB, LimitExceededError, Limits
from ticdc_lake.protocols import CodecSettings, make_decoder, make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver.events import INSERT, Column, RowEvent
from ticdc_lake.silver.mysql import TYPE_LONG, TYPE_VARCHAR

GIB = 1024 * MIB


def snappy_bomb(size: int) -> bytes:
    """A valid snappy block of `size` bytes of "x", written by hand at ~3 bytes per 64 (the
    best snappy does) so no test has to hold the expanded bytes."""
    header = bytearray()
    length = size
    while length >= 0x80:
        header.append(length & 0x7F | 0x80)
        length >>= 7
    header.append(length)
    copies, rest = divmod(size - 1, 64)
    body = b"\x00x" + b"\xfe\x01\x00" * copies  # a 1-byte literal, then 64-byte copies of it
    if rest:
        body += bytes([(rest - 1) << 2 | 2, 1, 0])
    return bytes(header) + body


def lz4_bomb(size: int) -> bytes:
    """An lz4 frame of `size` zero bytes, compressed a MiB at a time (~1/255 of the size)."""
    compressor = cramjam.lz4.Compressor()
    chunk = bytes(MIB)
    for _ in range(size // MIB):
        compressor.compress(chunk)
    return bytes(compressor.finish())


BOMBS = {"snappy": snappy_bomb, "lz4": lz4_bomb}


@pytest.mark.parametrize("codec", ["snappy", "lz4"])
def test_the_bombs_are_what_they_claim(codec):
    assert decompress(codec, BOMBS[codec](3 * MIB + 5), Limits()) == (
        b"x" * (3 * MIB + 5) if codec == "snappy" else bytes(3 * MIB)
    )


@pytest.mark.parametrize("codec", ["snappy", "lz4"])
@pytest.mark.parametrize("size", [MIB - 1, MIB, MIB + 1, 5 * MIB])
def test_output_up_to_the_limit_passes_and_past_it_is_refused(codec, size):
    limits = Limits(max_message_bytes=MIB)
    payload = compress(codec, bytes(range(256)) * (size // 256) + b"!" * (size % 256))
    if size <= MIB:
        assert len(decompress(codec, payload, limits)) == size
        return
    with pytest.raises(LimitExceededError, match=r"exceeds limits\.max-message-bytes = 1,048,576"):
        decompress(codec, payload, limits)


def test_a_snappy_length_is_refused_before_anything_is_decompressed():
    # The leading varint claims 4 GiB - 1; the body is not even there.
    with pytest.raises(LimitExceededError, match=r"value \(4,294,967,295\) exceeds"):
        decompress("snappy", b"\xff\xff\xff\xff\x0f\x00x", Limits())


def test_corrupt_data_is_still_a_plain_decode_error():
    for codec in ("snappy", "lz4"):
        with pytest.raises(DecodeError, match=f"not valid {codec}-compressed data") as caught:
            decompress(codec, b"\x04\x22\x4d\x18garbage", Limits())
        assert not isinstance(caught.value, LimitExceededError)


_PEAK = textwrap.dedent(
    """
    import sys
    from ticdc_lake.compression import decompress
    from ticdc_lake.errors import DecodeError
    from ticdc_lake.limits import Limits

    codec, path = sys.argv[1:]
    data = open(path, "rb").read()
    def status(field):  # in KiB
        with open("/proc/self/status") as lines:
            return next(int(line.split()[1]) for line in lines if line.startswith(field))

    # Start the peak (VmHWM) afresh at the current size: the imports peaked higher.
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    before = status("VmRSS")
    try:
        decompress(codec, data, Limits())
        outcome = "decompressed"
    except DecodeError as error:
        outcome = type(error).__name__ + ": " + str(error)
    print((status("VmHWM") - before) * 1024)
    print(outcome)
    """
)


@pytest.mark.parametrize(("codec", "size"), [("lz4", GIB), ("snappy", 128 * MIB)])
def test_peak_memory_of_a_bomb_stays_under_twice_the_limit(tmp_path, codec, size):
    """A 1 GiB lz4 bomb (4 MiB as sent) and a 128 MiB snappy one (6 MiB: snappy cannot do
    better than 1:21) decompressed in a fresh process: the peak RSS grows by less than twice
    limits.max_message_bytes (10 MiB) while they are refused."""
    path = tmp_path / f"bomb.{codec}"
    path.write_bytes(BOMBS[codec](size))
    result = subprocess.run(
        [sys.executable, "-c", _PEAK, codec, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    growth, outcome = result.stdout.splitlines()
    assert outcome.startswith("LimitExceededError: ") and "limits.max-message-bytes" in outcome
    assert int(growth) < 2 * Limits().max_message_bytes, (int(growth) / MIB, outcome)


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
@pytest.mark.parametrize("codec", ["snappy", "lz4"])
def test_decoders_refuse_a_bomb_naming_the_record_and_the_limit(protocol, codec):
    settings = CodecSettings(compression=codec, limits=Limits(max_message_bytes=64 * 1024))
    row = RowEvent(
        1 << 40, "s", "t", INSERT,
        {"id": Column(TYPE_LONG, 3, 1), "note": Column(TYPE_VARCHAR, 0, "y" * 100_000)},
        None, "topic", 0, 0,
    )  # fmt: skip
    [message] = make_encoder(protocol, settings).encode([row])
    record = KafkaRecord("topic", 2, 41, message.key, message.value)
    with pytest.raises(LimitExceededError, match=r"limits\.max-message-bytes = 65,536") as caught:
        make_decoder(protocol, settings).decode(record)
    assert (caught.value.protocol, caught.value.partition, caught.value.offset) == (
        protocol,
        2,
        41,
    )
    roomy = CodecSettings(compression=codec)
    [event] = make_decoder(protocol, roomy).decode(record)
    assert event.columns["note"].value == "y" * 100_000
