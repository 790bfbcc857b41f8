"""Benchmark: land straight from Kafka against land of the ``kcat`` export of the same records.

    python -m bench.kafka_land [--row-events 1000000] [--protocol craft|open-protocol]
        [--out bench/results/kafka-land.json]

The pipeline benchmark's realistic workload (cached under ``bench/.work/``) is produced, in
order and to the generator's partitions, to a real broker on 127.0.0.1 (one KRaft node from
Maven Central's jars: the tests' harness, ``tests/kafka_broker.py``). Then, in one SparkSession
on ``local[2]``, alternating, ``--rounds`` times each on a fresh lake:

- ``kcat``: ``kcat -C -J -e`` of the whole topic into a file (timed on its own), then land;
- ``kafka``: land with the topic as its input (the broker asked for offsets, Spark's Kafka
  batch source reading them into a Parquet export that lands).

Both must leave bronze with every record once. Writes the fastest of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from confluent_kafka import Producer
from deltalake import DeltaTable
from ticdc_lake.bronze.land import land
from ticdc_lake.config import load_config
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.sample.workload.generator import REALISTIC

from bench.machine import machine_report
from bench.pipeline import workload
from tests.kafka_broker import available_jars, running_broker

TOPIC = "bench-land"
PARTITIONS = 4


def produce(bootstrap: str, exports: Path) -> int:
    """Every record of the workload's export files to TOPIC, each to its partition in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "batch.size": 1 << 20})  # fmt: skip
    count = 0
    for path in sorted(exports.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(columns=["key", "value", "partition"]):
            for key, value, partition in zip(*(c.to_pylist() for c in batch.columns), strict=True):
                while True:
                    try:
                        producer.produce(TOPIC, value=value, key=key, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
                count += 1
    if producer.flush(120):
        raise RuntimeError("the broker did not take every record")
    return count


def lake_config(directory: Path, run: Path, inputs: list) -> object:
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    document = yaml.safe_load((directory / "pipeline.yaml").read_text())
    (generated,) = document["topics"]
    document["topics"] = {TOPIC: document["topics"][generated]}
    document.pop("changefeeds", None)
    document |= {"lake": str(run / "lake"), "inputs": inputs}
    path = run / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(path)


def bronze_rows(config) -> int:
    return DeltaTable(str(config.lake / "bronze" / "records")).to_pyarrow_dataset().count_rows()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-events", type=int, default=1_000_000)
    parser.add_argument("--protocol", default="craft", choices=("craft", "open-protocol"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/kafka-land.json"))
    args = parser.parse_args()
    directory, _ = workload(args.row_events, args.protocol, 0, REALISTIC)
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-land-"))
    results: dict[str, list[float]] = {"kcat_export": [], "land_kcat": [], "land_kafka": []}
    (work / "broker").mkdir()
    with running_broker(work / "broker", available_jars()) as broker:
        broker.create_topic(TOPIC, PARTITIONS, {"retention.ms": "-1"})
        started = time.perf_counter()
        records = produce(broker.bootstrap, directory / "exports")
        produced_s = time.perf_counter() - started
        spark = build_session("bench-kafka-land", master="local[2]",
                              conf={"spark.ui.enabled": "false"})  # fmt: skip
        kafka_input = [{"kafka": {"bootstrap-servers": broker.bootstrap, "topics": [TOPIC]}}]
        for _ in range(args.rounds):
            exported = work / "kcat" / "topic.kcat.jsonl"
            exported.parent.mkdir(exist_ok=True)
            started = time.perf_counter()
            with open(exported, "wb") as sink:
                subprocess.run(["kcat", "-C", "-J", "-e", "-q", "-b", broker.bootstrap,
                                "-t", TOPIC], stdout=sink, check=True)  # fmt: skip
            results["kcat_export"].append(time.perf_counter() - started)
            for name, inputs in (("land_kcat", [str(exported)]), ("land_kafka", kafka_input)):
                config = lake_config(directory, work / name, inputs)
                started = time.perf_counter()
                land(spark, config)
                results[name].append(time.perf_counter() - started)
                if bronze_rows(config) != records:
                    raise AssertionError(f"{name}: bronze holds {bronze_rows(config)} records, "
                                         f"{records} were produced")  # fmt: skip
            print(json.dumps({k: round(v[-1], 2) for k, v in results.items()}), flush=True)
        spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    best = {name: round(min(times), 2) for name, times in results.items()}
    report = {
        "benchmark": "kafka-land",
        "row_events": args.row_events,
        "protocol": args.protocol,
        "records": records,
        "produce_s": round(produced_s, 1),
        "machine": machine_report(load_start),
        "runs_s": {name: [round(t, 2) for t in times] for name, times in results.items()},
        "best_s": best,
        "ratio_land_kafka_to_land_kcat": round(best["land_kafka"] / best["land_kcat"], 2),
        "ratio_land_kafka_to_kcat_export_and_land": round(
            best["land_kafka"] / (best["kcat_export"] + best["land_kcat"]), 2
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{records:,} records: land from Kafka {best['land_kafka']:.1f} s; kcat export "
          f"{best['kcat_export']:.1f} s + land of it {best['land_kcat']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
