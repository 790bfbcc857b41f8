"""Land straight from a real Kafka broker (bronze/kafka_source.py): bounded runs from the
offset after bronze's highest, each offset once across a run killed after its read, a rerun
that adds nothing, gold equal to the generator's tables, and one clear message for a missing
topic, an unreachable broker or an unset secret, with the secret nowhere in it."""

from __future__ import annotations

import math
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable
from ticdc_lake.bronze import land as land_stage
from ticdc_lake.bronze.kafka_source import KafkaSourceError
from ticdc_lake.bronze.land import land
from ticdc_lake.config import load_config
from ticdc_lake.errors import ConfigError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated

from tests.e2e import lakes
from tests.e2e.test_kill_and_rerun import Job

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3
SECRET = "jaas-secret-\u00e9-42"


def produce(bootstrap: str, records, topic: str) -> None:
    """``records`` to their partitions of ``topic``, in order, as the generator numbered them."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failures = []
    for record in records:
        producer.produce(
            topic, value=record.value, key=record.key, partition=record.partition,
            timestamp=record.timestamp_ms, headers=[("h", b"\xff" + str(record.offset).encode())],
            on_delivery=lambda error, _: error is not None and failures.append(error),
        )  # fmt: skip
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures


def configure(output, topic: str, kafka: dict, path: Path, lake: str = "lake") -> Path:
    """The generator's config with its one topic renamed ``topic`` (tests/e2e/test_real_kafka.py
    uses the generator's names on the same broker), reading ``kafka``."""
    document = yaml.safe_load(output.config_path.read_text())
    (generated,) = output.routing.topics
    document["topics"] = {topic: document["topics"][generated]}
    for feed in (document.get("changefeeds") or {}).values():
        feed["topics"] = [topic]
    document |= {"lake": lake, "inputs": [{"kafka": {"topics": [topic], **kafka}}]}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def versions(layout: LakeLayout) -> dict[str, int]:
    return {
        str(path.parent): DeltaTable(str(path.parent)).version()
        for path in layout.root.rglob("_delta_log")
    }


@pytest.fixture(scope="module")
def kafka_lake(spark, kafka_broker, tmp_path_factory):
    directory = tmp_path_factory.mktemp("kafka-source")
    options = GenerateOptions(protocol="craft", partitions=PARTITIONS, seed=57, transactions=30,
                              layout="jsonl", idle_partitions=1)  # fmt: skip
    output = write_generated(directory, options)
    topic = "direct-craft"
    kafka_broker.create_topic(topic, PARTITIONS)
    kafka = {"bootstrap-servers": kafka_broker.bootstrap}
    path = configure(output, topic, kafka, directory / "direct.yaml")
    return output, load_config(path), topic


def test_land_reads_new_offsets_each_once_and_gold_is_the_generators(
    spark, kafka_broker, kafka_lake, monkeypatch
):
    output, config, topic = kafka_lake
    layout = LakeLayout(config.lake)
    streams = {key: stream.records for key, stream in sorted(output.encoded.items())}
    firsts = {key: math.ceil(len(records) * 0.5) for key, records in streams.items()}
    produce(
        kafka_broker.bootstrap, [r for k, rs in streams.items() for r in rs[: firsts[k]]], topic
    )

    first = land(spark, config)
    assert first.records_added == sum(firsts.values()) and first.offset_gaps == 0
    assert not any(layout.kafka_exports.iterdir())  # landed: the export is gone
    before = versions(layout)
    assert land(spark, config).batch_id is None  # nothing new: no batch, no version
    assert versions(layout) == before

    # The rest, and two killed runs: one after its read, before its batch's plan is saved;
    # one in the middle of its batch (which then holds both reads).
    produce(
        kafka_broker.bootstrap, [r for k, rs in streams.items() for r in rs[firsts[k] :]], topic
    )
    for step in ("save_plan", "run_batch"):
        with monkeypatch.context() as patch:

            def killed(*_args, **_kwargs):
                raise KeyboardInterrupt("killed")

            patch.setattr(land_stage, step, killed)
            with pytest.raises(KeyboardInterrupt):
                land(spark, config)
        assert any(layout.kafka_exports.iterdir())  # the killed run's export stays
    rerun = land(spark, config)
    rest = sum(len(rs) for rs in streams.values()) - sum(firsts.values())
    # The batch finished by the rerun holds both reads of the same offsets: each added once.
    assert rerun.recovered
    assert (rerun.records_added, rerun.duplicates, rerun.conflicts) == (rest, rest, 0)
    assert not any(layout.kafka_exports.iterdir())
    bronze = lakes.table_rows(layout.bronze)
    keys = [(row["topic"], row["partition"], row["offset"]) for row in bronze]
    assert len(keys) == len(set(keys)) == sum(len(rs) for rs in streams.values())
    by_key = {(r["topic"], r["partition"], r["offset"]): r for r in bronze}
    for records in streams.values():
        for record in records:
            row = by_key[(topic, record.partition, record.offset)]
            assert (row["key"], row["value"]) == (record.key, record.value)
            assert row["headers"] == [{"key": "h", "value": b"\xff" + str(record.offset).encode()}]

    _, _, watermarked, _ = lakes.run_stages(spark, config, compacting=True)
    (feed,) = watermarked.changefeeds
    assert feed.watermark == output.workload.resolved_ts[-1]
    lakes.assert_gold_is_expected(layout, output.workload, feed.watermark)


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    "kafka, expected",
    [
        ({"topic": "missing"}, r"topic 'missing': no such topic on the broker"),
        ({"bootstrap-servers": "127.0.0.1:{port}", "timeout": "3s"}, r"Timeout"),
    ],
    ids=["missing-topic", "unreachable-broker"],
)
def test_a_broker_problem_stops_land_with_one_message_and_no_secret(
    spark, kafka_broker, kafka_lake, tmp_path, monkeypatch, kafka, expected
):
    output, _, topic = kafka_lake
    monkeypatch.setenv("KAFKA_TEST_JAAS", SECRET)
    source = {
        "bootstrap-servers": kafka_broker.bootstrap,
        "options-env": {"sasl.jaas.config": "KAFKA_TEST_JAAS"},
    } | {name: value for name, value in kafka.items() if name != "topic"}
    source["bootstrap-servers"] = source["bootstrap-servers"].format(port=_unused_port())
    path = configure(output, kafka.get("topic", topic), source, tmp_path / "pipeline.yaml",
                     str(tmp_path / "lake"))  # fmt: skip
    with pytest.raises(KafkaSourceError, match=expected) as raised:
        land(spark, load_config(path))
    assert SECRET not in str(raised.value) and len(str(raised.value).splitlines()) == 1
    assert SECRET not in repr(load_config(path))
    monkeypatch.delenv("KAFKA_TEST_JAAS")
    with pytest.raises(ConfigError, match="KAFKA_TEST_JAAS"):
        land(spark, load_config(path))


def test_offsets_deleted_before_land_read_them_are_an_offset_gap(
    spark, kafka_broker, kafka_lake, tmp_path
):
    output, _, _ = kafka_lake
    topic = "direct-retention"
    kafka_broker.create_topic(topic, PARTITIONS)
    kafka = {"bootstrap-servers": kafka_broker.bootstrap}
    path = configure(output, topic, kafka, tmp_path / "pipeline.yaml", str(tmp_path / "lake"))
    config = load_config(path)
    (_, partition), stream = max(output.encoded.items(), key=lambda item: len(item[1].records))
    records = stream.records
    read, deleted = len(records) // 3, 2 * len(records) // 3
    produce(kafka_broker.bootstrap, records[:read], topic)
    assert land(spark, config).records_added == read
    produce(kafka_broker.bootstrap, records[read:], topic)
    # What retention does to a lake that fell behind: the offsets before `deleted` are gone.
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, deleted)]).values():
        future.result(timeout=30)

    after = land(spark, config)
    assert after.records_added == len(records) - deleted
    assert (after.offset_gaps, after.missing_offsets) == (1, deleted - read)
    (gap,) = lakes.table_rows(LakeLayout(config.lake).offset_gaps)
    assert (gap["topic"], gap["partition"], gap["from_offset"], gap["to_offset"]) == (
        topic, partition, read, deleted - 1
    )  # fmt: skip


def test_the_kafka_source_lands_what_land_of_a_kcat_export_lands(
    spark, kafka_broker, kcat, kafka_lake, tmp_path
):
    """The same records through both paths: bronze's rows equal but for where they came from
    (source_file) and when (batch_id, landed_at)."""
    output, _, _ = kafka_lake
    topic = "direct-same-rows"
    kafka_broker.create_topic(topic, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})
    produce(kafka_broker.bootstrap, [r for s in output.encoded.values() for r in s.records], topic)
    exported = tmp_path / "exports" / "topic.kcat.jsonl"
    exported.parent.mkdir()
    with open(exported, "wb") as sink:
        subprocess.run([kcat, "-C", "-J", "-e", "-q", "-b", kafka_broker.bootstrap, "-t", topic],
                       stdout=sink, check=True)  # fmt: skip
    kafka = {"bootstrap-servers": kafka_broker.bootstrap}
    rows = {}
    for name in ("kafka", "kcat"):
        path = configure(output, topic, kafka, tmp_path / f"{name}.yaml", f"lake-{name}")
        if name == "kcat":
            document = yaml.safe_load(path.read_text())
            document["inputs"] = [str(exported)]
            path.write_text(yaml.safe_dump(document, sort_keys=False))
        config = load_config(path)
        assert land(spark, config).errors == 0
        rows[name] = sorted(
            (
                {k: v for k, v in row.items() if k not in ("source_file", "batch_id", "landed_at")}
                for row in lakes.table_rows(LakeLayout(config.lake).bronze)
            ),
            key=lambda row: (row["partition"], row["offset"]),
        )
    assert len(rows["kafka"]) == sum(len(s.records) for s in output.encoded.values())
    assert rows["kafka"] == rows["kcat"]


def test_the_land_job_killed_mid_write_then_rerun_lands_each_offset_once(
    kafka_broker, kafka_lake, tmp_path
):
    """The land job as the DAGs run it (spark-submit with the jars setup fetched), SIGKILLed
    once its first data file appears (the Kafka export or bronze), then run again."""
    output, _, _ = kafka_lake
    topic = "direct-killed"
    kafka_broker.create_topic(topic, PARTITIONS)
    produce(kafka_broker.bootstrap, [r for s in output.encoded.values() for r in s.records], topic)
    kafka = {"bootstrap-servers": kafka_broker.bootstrap}
    path = configure(output, topic, kafka, tmp_path / "pipeline.yaml", str(tmp_path / "lake"))
    layout = LakeLayout(load_config(path).lake)
    (tmp_path / "logs").mkdir()
    job = Job("land", path, tmp_path / "logs")
    ended, _ = job.kill_mid_write([layout.kafka_exports, layout.bronze])
    result, _ = job.run()
    bronze = lakes.table_rows(layout.bronze)
    keys = {(row["partition"], row["offset"]) for row in bronze}
    assert len(keys) == len(bronze) == sum(len(s.records) for s in output.encoded.values()), ended
    assert result["conflicts"] == 0 and not any(layout.kafka_exports.iterdir())
