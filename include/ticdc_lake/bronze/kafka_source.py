"""Land straight from Kafka: the records a run takes, read by Spark's Kafka batch source into a
Spark Kafka Parquet export under ``layout.kafka_exports``, which then lands like any export.

Bounded and repeatable: at its start a run captures, per partition of each configured topic,
the end offset, and reads from the offset after the highest bronze holds (the earliest the
broker retains, for a partition bronze lacks) up to it. A run killed after reading and before
committing leaves its export behind; the next run lands it with what it reads itself, and
land's offset dedup keeps each offset once. Offsets retention deleted before they were read
leave a hole between bronze's runs, which ``offset_gaps`` reports like any missing offsets.

The broker is asked through the Kafka consumer Spark's source itself uses (the JVM's
``kafka-clients``), so one set of settings, Java client names, serves both.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from ticdc_lake.config import KafkaSourceConfig
from ticdc_lake.delta import delta_table_exists, open_table
from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.redact import redact_text


class KafkaSourceError(TicdcLakeError):
    """The broker cannot be reached, refuses us, or lacks a topic: the stage stops."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # the first offset read
    end: int  # the partition's end offset when the run started (not read)


def offset_ranges(
    spark: SparkSession, source: KafkaSourceConfig, landed: dict[tuple[str, int], int]
) -> list[OffsetRange]:
    """Per partition of the source's topics, the offsets this run reads (``landed``: the
    highest offset bronze holds per (topic, partition)); partitions with nothing new left out."""
    with _Consumer(spark, source) as consumer:
        ranges = []
        for topic in source.topics:
            earliest, ends = _offsets(consumer, source, topic)
            for partition, end in sorted(ends.items()):
                start = max(landed.get((topic, partition), -1) + 1, earliest[partition])
                if start < end:
                    ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def export_ranges(
    spark: SparkSession, source: KafkaSourceConfig, ranges: Iterable[OffsetRange], folder: Path
) -> Path | None:
    """The ranges' records, read by the executors, as one Spark Kafka Parquet export folder
    under ``folder`` (None: nothing to read). Written under a temporary name and renamed, so
    a folder there holds a whole export."""
    ranges = list(ranges)
    if not ranges:
        return None
    starting = {r.topic: {} for r in ranges}
    ending = {r.topic: {} for r in ranges}
    for r in ranges:
        starting[r.topic][str(r.partition)] = r.start
        ending[r.topic][str(r.partition)] = r.end
    reader = spark.read.format("kafka")
    for name, value in source.settings().items():
        reader = reader.option(f"kafka.{name}", value)
    records = (
        reader.option("assign", json.dumps({t: sorted(map(int, p)) for t, p in starting.items()}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        # Retention may delete offsets between the capture and the read: they become a gap
        # bronze reports, not a failed run.
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "true")
        .load()
    )
    run = uuid.uuid4().hex
    written, final = folder / f".{run}.tmp", folder / run
    try:
        records.write.parquet(str(written))
    except (Py4JJavaError, PySparkException) as exc:
        shutil.rmtree(written, ignore_errors=True)
        raise KafkaSourceError(
            f"kafka input {redact_text(source.bootstrap_servers)}: reading "
            f"{', '.join(sorted(starting))} failed: {_first_line(exc)}"
        ) from None
    written.rename(final)
    return final


def highest_landed(offset_ranges_table: Path) -> dict[tuple[str, int], int]:
    """The highest offset bronze holds per (topic, partition), from ``offset_ranges``."""
    if not delta_table_exists(offset_ranges_table):
        return {}
    runs = open_table(offset_ranges_table).to_pyarrow_table(
        columns=["topic", "partition", "to_offset"]
    )
    if not runs.num_rows:
        return {}
    highest = runs.group_by(["topic", "partition"]).aggregate([("to_offset", "max")])
    return {(row["topic"], row["partition"]): row["to_offset_max"] for row in highest.to_pylist()}


def remove_landed_exports(folder: Path, pending: Iterable[str]) -> None:
    """Remove the export folders under ``folder`` none of whose files is in ``pending`` (not
    landed yet, or changed since): their records are in bronze."""
    waiting = {Path(path).parent for path in pending}
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        if child.is_dir() and child not in waiting:
            shutil.rmtree(child, ignore_errors=True)  # a killed run's .tmp folder too


def export_files(folder: Path) -> list[str]:
    """The Parquet files of the finished exports under ``folder``."""
    if not folder.is_dir():
        return []
    return sorted(
        str(path)
        for child in folder.iterdir()
        if child.is_dir() and not child.name.startswith(".")
        for path in child.glob("*.parquet")
    )


# --- asking the broker -----------------------------------------------------------------------


class _Consumer:
    """A JVM KafkaConsumer for metadata and offsets, closed on exit."""

    def __init__(self, spark: SparkSession, source: KafkaSourceConfig):
        jvm = spark.sparkContext._jvm
        self.jvm = jvm
        properties = jvm.java.util.Properties()
        settings = source.settings() | {
            "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
            "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
            "enable.auto.commit": "false",
            "allow.auto.create.topics": "false",
        }
        for name, value in settings.items():
            properties.setProperty(name, value)
        try:
            self.consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(properties)
        except Py4JJavaError as exc:
            raise KafkaSourceError(
                f"kafka input {redact_text(source.bootstrap_servers)}: cannot make a consumer: "
                f"{_first_line(exc)}"
            ) from None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.consumer.close()


def _offsets(consumer: _Consumer, source: KafkaSourceConfig, topic: str):
    """(earliest, end) offsets per partition of ``topic``."""
    jvm = consumer.jvm
    timeout = jvm.java.time.Duration.ofMillis(int(source.timeout_seconds * 1000))
    where = f"kafka input {redact_text(source.bootstrap_servers)}, topic {topic!r}"
    try:
        infos = consumer.consumer.partitionsFor(topic, timeout)
        if infos is None or infos.isEmpty():
            raise KafkaSourceError(f"{where}: no such topic on the broker")
        partitions = jvm.java.util.ArrayList()
        for info in infos:
            partitions.add(jvm.org.apache.kafka.common.TopicPartition(topic, info.partition()))
        earliest = consumer.consumer.beginningOffsets(partitions, timeout)
        ends = consumer.consumer.endOffsets(partitions, timeout)
    except Py4JJavaError as exc:
        raise KafkaSourceError(f"{where}: {_first_line(exc)}") from None
    return (
        {tp.partition(): int(earliest.get(tp)) for tp in partitions},
        {tp.partition(): int(ends.get(tp)) for tp in partitions},
    )


def _first_line(exc: BaseException) -> str:
    """The Java exception's class and message, not its stack (redacted)."""
    if isinstance(exc, Py4JJavaError):
        java = exc.java_exception
        text = f"{java.getClass().getName()}: {java.getMessage()}"
    else:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact_text(text)


def read_kafka_inputs(
    spark: SparkSession,
    sources: Iterable[KafkaSourceConfig],
    offset_ranges_table: Path,
    folder: Path,
) -> None:
    """Each source's new offsets exported under ``folder``."""
    landed = highest_landed(offset_ranges_table)
    for source in sources:
        export_ranges(spark, source, offset_ranges(spark, source, landed), folder)
