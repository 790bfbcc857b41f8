"""The real-Kafka harness (tests/kafka_broker.py): the session's KRaft broker serves topics of
both timestamp types to kcat, a broker is stopped when its block ends even on failure, and one
that cannot start says why with the end of its log."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from confluent_kafka import Producer

from tests.kafka_broker import KafkaBroker, cluster_id, running_broker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_broker_serves_both_timestamp_types_to_kcat(kafka_broker, kcat):
    kafka_broker.create_topic("harness-create", 3)
    kafka_broker.create_topic("harness-append", 1, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for p in range(3):
        producer.produce("harness-create", b"v", b"k", partition=p, timestamp=1_000 + p)
    producer.produce("harness-append", b"v", b"k", timestamp=1_000)
    assert producer.flush(30) == 0

    def consumed(topic: str) -> list[dict]:
        command = [kcat, "-C", "-J", "-e", "-q", "-b", kafka_broker.bootstrap, "-t", topic]
        done = subprocess.run(command, capture_output=True, check=True, timeout=60)
        return [json.loads(line) for line in done.stdout.splitlines()]

    created = consumed("harness-create")
    assert sorted((m["partition"], m["offset"], m["tstype"], m["ts"]) for m in created) == [
        (0, 0, "create", 1_000),
        (1, 0, "create", 1_001),
        (2, 0, "create", 1_002),
    ]
    (appended,) = consumed("harness-append")
    assert appended["tstype"] == "logappend" and appended["ts"] != 1_000


def test_a_broker_is_stopped_when_its_block_ends_even_on_failure(tmp_path, kafka_broker):
    with pytest.raises(ZeroDivisionError), running_broker(tmp_path, kafka_broker.jars) as broker:
        assert broker.process.poll() is None
        1 / 0  # noqa: B018 - the failure the broker must outlive no longer than the block
    assert broker.process.returncode is not None


def test_a_broker_that_cannot_start_says_why_with_its_log(tmp_path, kafka_broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = KafkaBroker(tmp_path, kafka_broker.jars, port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match=r"exited with .* before it was ready") as failed:
            broker.start()
    assert "Address already in use" in str(failed.value), str(failed.value)
    assert broker.process.returncode is not None


def test_cluster_ids_are_never_read_as_an_option():
    """base64url may begin with '-', which kafka-storage's parser takes for an option."""
    ids = [cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)
