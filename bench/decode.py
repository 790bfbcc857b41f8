"""Decode throughput per protocol, beside its floor, on the same generated events (issue 2).

    python -m bench.decode [--row-events 200000] [--repeats 3] [--out bench/results/decode.json]

One generated workload (every TiDB column type, the canonical tables) is dispatched and encoded
in each protocol; every decoder then decodes the same records on one core. Beside each: the
floor for the same bytes (`orjson.loads` of every JSON document for the JSON protocols,
`fastavro.schemaless_reader` of key and value for Avro), confluent-kafka's `AvroDeserializer`
for Avro, the pure-Python path where a compiled one exists, and Craft beside our Open Protocol
decoder. Times are CPU seconds (time.process_time), best of --repeats, so another process on the
machine disturbs them little.
"""

from __future__ import annotations

import argparse
import gc
import http.server
import io
import json
import platform
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import fastavro
import orjson
from ticdc_lake.protocols import make_decoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.dispatch import route
from ticdc_lake.sample.workload.output import GenerateOptions, codec_settings, encode_routing
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

ROWS_PER_TRANSACTION = 3.8  # what the generator averages; used to size the workload


def encoded_records(protocol: str, workload, registry) -> tuple[list[KafkaRecord], object]:
    options = GenerateOptions(protocol=protocol, partitions=4, replays=0)
    settings = codec_settings(options, registry if protocol == "avro" else None)
    routing = route(workload, protocol, partitions=4, replays=0)
    streams = encode_routing(routing, settings)
    return [record for stream in streams.values() for record in stream.records], settings


def best_cpu_seconds(run: Callable[[], int], repeats: int) -> tuple[float, int]:
    """(best CPU seconds over `repeats` runs, what one run returned)."""
    best, result = float("inf"), 0
    for _ in range(repeats):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    return best, result


def decode_all(decoder, records: list[KafkaRecord]) -> Callable[[], int]:
    def run() -> int:
        return sum(len(decoder.decode(record)) for record in records)

    return run


def open_protocol_documents(records: list[KafkaRecord]) -> list[bytes]:
    """Every key and value JSON inside the batch framing: what orjson alone would parse."""
    documents = []
    for record in records:
        key, value = record.key, record.value or b""
        position, value_position = 8, 0
        while position < len(key):
            (length,) = struct.unpack_from(">Q", key, position)
            documents.append(key[position + 8 : position + 8 + length])
            position += 8 + length
            (length,) = struct.unpack_from(">Q", value, value_position)
            if length:
                documents.append(value[value_position + 8 : value_position + 8 + length])
            value_position += 8 + length
    return documents


def parse_all(documents: list[bytes]) -> Callable[[], int]:
    loads = orjson.loads

    def run() -> int:
        for document in documents:
            loads(document)
        return len(documents)

    return run


def avro_floor(records: list[KafkaRecord], registry) -> Callable[[], int]:
    """fastavro.schemaless_reader of key and value with already parsed writer schemas."""
    parsed: dict[int, object] = {}

    def schema(payload: bytes):
        (schema_id,) = struct.unpack_from(">I", payload, 1)
        if schema_id not in parsed:
            parsed[schema_id] = fastavro.parse_schema(
                json.loads(registry.get_schema(schema_id).text)
            )
        return parsed[schema_id]

    payloads = [p for r in records for p in (r.key, r.value) if p and p[0] == 0]

    def run() -> int:
        reader = fastavro.schemaless_reader
        for payload in payloads:
            reader(io.BytesIO(payload[5:]), schema(payload), None)
        return len(payloads)

    return run


def serve_registry(registry) -> tuple[str, Callable[[], None]]:
    """`GET /schemas/ids/{id}` on 127.0.0.1 for confluent's client; returns (url, stop)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            if path.startswith("/schemas/ids/"):
                status = 200
                schema_id = int(path.rsplit("/", 1)[-1])
                body = orjson.dumps({"schema": registry.get_schema(schema_id).text})
            else:  # e.g. the client's subject-association lookups: not a registry we emulate
                status, body = 404, orjson.dumps({"error_code": 40401, "message": "not found"})
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}", server.shutdown


def confluent_deserializer(records: list[KafkaRecord], url: str) -> Callable[[], int]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = AvroDeserializer(SchemaRegistryClient({"url": url}))
    work = []
    for record in records:
        if record.key and record.key[0] == 0:
            work.append((record.key, SerializationContext(record.topic, MessageField.KEY)))
        if record.value and record.value[0] == 0:
            work.append((record.value, SerializationContext(record.topic, MessageField.VALUE)))

    def run() -> int:
        for payload, context in work:
            deserialize(payload, context)
        return len(work)

    return run


def measure(protocol: str, records, settings, repeats: int, registry) -> dict:
    decoder = make_decoder(protocol, settings)
    seconds, events = best_cpu_seconds(decode_all(decoder, records), repeats)
    result = {
        "records": len(records),
        "events": events,
        "bytes": sum(len(r.key or b"") + len(r.value or b"") for r in records),
        "events_per_s": round(events / seconds),
    }
    if getattr(decoder, "speedups", None) is not None:
        pure = type(decoder)(settings, speedups=None)
        pure_seconds, _ = best_cpu_seconds(decode_all(pure, records), repeats)
        result["pure_python_events_per_s"] = round(events / pure_seconds)
    floor = None
    if protocol == "open-protocol":
        floor = parse_all(open_protocol_documents(records))
    elif protocol == "canal-json":
        floor = parse_all([record.value for record in records])
    elif protocol == "avro":
        floor = avro_floor(records, registry)
        url, stop = serve_registry(registry)
        try:
            confluent_seconds, _ = best_cpu_seconds(confluent_deserializer(records, url), repeats)
        finally:
            stop()
        result["confluent_events_per_s"] = round(events / confluent_seconds)
        result["speedup_vs_confluent"] = round(confluent_seconds / seconds, 2)
    if floor is not None:
        floor_seconds, _ = best_cpu_seconds(floor, repeats)
        result["floor_events_per_s"] = round(events / floor_seconds)
        result["ratio_to_floor"] = round(seconds / floor_seconds, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row-events", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/decode.json"))
    args = parser.parse_args(argv)

    transactions = max(1, round(args.row_events / ROWS_PER_TRANSACTION))
    workload = generate_workload(seed=args.seed, transactions=transactions)
    print(f"workload: {len(workload.row_events)} row events, {len(workload.events)} events")
    results = {}
    for protocol in ("open-protocol", "craft", "canal-json", "avro"):
        registry = InMemorySchemaRegistry()
        records, settings = encoded_records(protocol, workload, registry)
        gc.collect()
        gc.freeze()  # the inputs are long-lived; do not let every collection walk them
        results[protocol] = measure(protocol, records, settings, args.repeats, registry)
        print(protocol, results[protocol], flush=True)
        del records
        gc.unfreeze()
    results["craft"]["speedup_vs_open_protocol"] = round(
        results["craft"]["events_per_s"] / results["open-protocol"]["events_per_s"], 2
    )
    report = {
        "benchmark": "decode",
        "row_events": len(workload.row_events),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
