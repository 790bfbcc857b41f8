"""Claim-check objects in a bucket of a real S3 API (tests/s3_server.py): read through the
config's storage.s3 settings with the same root checks and size limit as local ones, and a
large Open Protocol message parked there decodes back; the credentials are never shown."""

from __future__ import annotations

import random

import pytest
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.bronze.exports import write_export
from ticdc_lake.config import load_config
from ticdc_lake.errors import ClaimCheckError, ConfigError
from ticdc_lake.protocols.open_protocol import OpenProtocolDecoder, OpenProtocolEncoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver.codecs import codec_settings
from ticdc_lake.silver.events import UPDATE

from tests.protocols.test_open_protocol import model, record, simple_row
from tests.s3_server import ACCESS_KEY, KEY_ENV, SECRET_ENV, SECRET_KEY


def claim_check_topic(s3_server, tmp_path, bucket: str, **extra):
    """The topic of a config whose claim-check root is ``s3://<bucket>/claims``."""
    options = "".join(f"      {name}: {value}\n" for name, value in extra.items())
    (tmp_path / "pipeline.yaml").write_text(
        "topics:\n"
        "  t:\n"
        "    protocol: open-protocol\n"
        "    partitions: 1\n"
        f"    claim-check-roots: [s3://{bucket}/claims]\n"
        "    options:\n"
        f"{options or '      {}'}\n"
        f"{s3_server.storage_yaml()}"
        "limits: {max-claim-check-bytes: 4KiB}\n"
    )
    return load_config(tmp_path / "pipeline.yaml").topics["t"]


def test_objects_in_the_bucket_are_read_under_the_root_and_the_limit(s3_server, tmp_path):
    bucket = s3_server.bucket()
    topic = claim_check_topic(s3_server, tmp_path, bucket)
    store = codec_settings(topic, load_config(tmp_path / "pipeline.yaml").limits).claim_check
    location = store.store(b"k", b"small")
    assert location.startswith(f"s3://{bucket}/claims/")
    assert store.fetch(location) == (b"k", b"small")
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="claims/big.json", Body=b"x" * 5000)
    client.put_object(Bucket=bucket, Key="outside.json", Body=b"{}")
    with pytest.raises(ClaimCheckError, match=r"limits\.max-claim-check-bytes = 4,096"):
        store.read(f"s3://{bucket}/claims/big.json")
    with pytest.raises(ClaimCheckError, match="is missing"):
        store.read(f"s3://{bucket}/claims/none.json")
    for outside in (
        f"s3://{bucket}/outside.json",
        f"s3://{bucket}/claims/../outside.json",
        f"s3://{bucket}/claims/%2e%2e/outside.json",
        f"s3://other-{bucket}/claims/x.json",
        f"{location}?endpoint_override=evil.example",
    ):
        with pytest.raises(ClaimCheckError, match="outside the configured storage roots"):
            store.read(outside)


def test_a_large_message_parked_in_the_bucket_decodes_back(s3_server, tmp_path):
    bucket = s3_server.bucket()
    parking = {"max_message_bytes": 300, "large_message_handle_option": "claim_check"}
    topic = claim_check_topic(s3_server, tmp_path, bucket, **parking)
    settings = codec_settings(topic)
    big = simple_row(2, random.Random(1).randbytes(600).hex(), op=UPDATE)
    (message,) = OpenProtocolEncoder(settings).encode([big])
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="claims/")
    assert [o["Key"].endswith(".json") for o in listed["Contents"]].count(True) == 1
    (decoded,) = OpenProtocolDecoder(settings).decode(record(message.key, message.value))
    assert model([decoded]) == model([big])


def test_unset_credentials_are_a_config_error_and_secrets_are_never_shown(
    s3_server, tmp_path, monkeypatch
):
    topic = claim_check_topic(s3_server, tmp_path, s3_server.bucket())
    shown = repr(topic) + repr(load_config(tmp_path / "pipeline.yaml"))
    assert KEY_ENV in shown and ACCESS_KEY not in shown and SECRET_KEY not in shown
    monkeypatch.delenv(SECRET_ENV)
    store = codec_settings(topic).claim_check
    with pytest.raises(ConfigError, match=f"{SECRET_ENV} not set") as error:
        store.read(f"s3://{topic.claim_check_roots[0][5:]}/x.json")
    assert ACCESS_KEY not in str(error.value)


def test_decode_on_spark_reads_parked_values_with_credentials_from_the_driver(
    spark, s3_server, tmp_path
):
    """Spark's workers started before the variables were set: the driver's reading travels."""
    bucket = s3_server.bucket()
    parking = {"max_message_bytes": 300, "large_message_handle_option": "claim_check"}
    topic = claim_check_topic(s3_server, tmp_path, bucket, **parking)
    rows = [simple_row(i, random.Random(i).randbytes(400).hex()) for i in range(5)]
    messages = OpenProtocolEncoder(codec_settings(topic)).encode(rows)
    records = [KafkaRecord("t", 0, n, m.key, m.value) for n, m in enumerate(messages)]
    (tmp_path / "exports").mkdir()
    write_export(tmp_path / "exports" / "t.jsonl", records, "jsonl")
    config = load_config(tmp_path / "pipeline.yaml")
    result = run_stages(spark, config, ["land", "decode"])
    decoded = result.result("decode")
    assert (decoded.records, decoded.decoded, decoded.quarantined) == (5, 5, 0)
