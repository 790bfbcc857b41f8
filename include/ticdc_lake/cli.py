"""`ticdc-lake`: decode Kafka exports, generate a sample workload, run the demo.

    ticdc-lake decode --protocol P [--compression C] [--schema-dir D | --schema-registry URL
                      | --schemas-topic FILE] [--claim-check-root R ...] [--no-tidb-extension]
                      FILE...
    ticdc-lake generate --out DIR --protocol P [--partitions N] [--seed S] [--transactions T]
                        [--format F] [--compression C] [--file-compression Z] ...
    ticdc-lake demo [--out DIR]

The work happens in the library (exports, protocols, workload); this module parses arguments
and prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from ticdc_lake import exports
from ticdc_lake.claimcheck import ClaimCheckStore
from ticdc_lake.compression import CODECS
from ticdc_lake.errors import ConfigError, TicdcLakeError
from ticdc_lake.events import to_json_dict
from ticdc_lake.protocols import PROTOCOLS, CodecSettings, make_decoder
from ticdc_lake.workload.check import run_demo
from ticdc_lake.workload.dispatch import DISPATCHERS
from ticdc_lake.workload.output import GenerateOptions, write_generated

_OUTPUT_CHUNK = 1 << 16


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as exc:
        print(f"ticdc-lake: configuration error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `ticdc-lake decode ... | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ticdc-lake", description="TiCDC Kafka exports to Delta tables: tools."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_decode(commands)
    _add_generate(commands)
    _add_demo(commands)
    return parser


# --- decode ---------------------------------------------------------------------------------


def _add_decode(commands) -> None:
    decode = commands.add_parser(
        "decode",
        help="print every event of Kafka export files as one JSON object per line",
        description="Decode Kafka export files (Parquet, JSON Lines, kcat -J; gzip/zstd too) "
        "and print one JSON object per event on stdout. Records that cannot be read or decoded "
        "are reported on stderr (file, partition, offset, reason) and decoding goes on; the "
        "exit status is 1 if there were any.",
    )
    decode.add_argument("--protocol", required=True, choices=PROTOCOLS)
    decode.add_argument(
        "--compression", default="none", choices=CODECS, help="TiCDC value compression"
    )
    schemas = decode.add_mutually_exclusive_group()
    schemas.add_argument("--schema-dir", help="Avro: directory of <id>.avsc / <id>.json schemas")
    schemas.add_argument("--schema-registry", metavar="URL", help="Avro: Confluent registry URL")
    schemas.add_argument("--schemas-topic", metavar="FILE", help="Avro: export of _schemas")
    decode.add_argument("--schema-registry-user", metavar="USER")
    decode.add_argument(
        "--schema-registry-password-env",
        metavar="VAR",
        help="name of the environment variable holding the registry password",
    )
    decode.add_argument(
        "--claim-check-root",
        action="append",
        default=[],
        metavar="URI",
        help="storage root claim-check objects may be read from (repeatable)",
    )
    decode.add_argument(
        "--no-tidb-extension",
        action="store_true",
        help="the changefeed ran without enable-tidb-extension",
    )
    decode.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a protocol option (e.g. content_compatible=true); VALUE is read as JSON if it can be",
    )
    decode.add_argument("files", nargs="+", metavar="FILE")
    decode.set_defaults(run=_run_decode)


def _schema_source(args) -> Any:
    from ticdc_lake import schema_registry

    if args.schema_dir:
        return schema_registry.DirectorySchemaSource(args.schema_dir)
    if args.schemas_topic:
        return schema_registry.SchemasTopicSource.from_file(args.schemas_topic)
    if args.schema_registry:
        password = None
        if args.schema_registry_password_env:
            password = os.environ.get(args.schema_registry_password_env)
            if password is None:
                raise ConfigError(
                    f"environment variable {args.schema_registry_password_env} is not set"
                )
        return schema_registry.RegistrySchemaSource.from_url(
            args.schema_registry, username=args.schema_registry_user, password=password
        )
    if args.protocol == "avro":
        raise ConfigError("avro needs --schema-dir, --schema-registry or --schemas-topic")
    return None


def _options(pairs: list[str]) -> tuple[tuple[str, Any], ...]:
    options = []
    for pair in pairs:
        name, equals, text = pair.partition("=")
        if not equals or not name:
            raise ConfigError(f"--option wants NAME=VALUE, not {pair!r}")
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        options.append((name, value))
    return tuple(options)


def decode_settings(args) -> CodecSettings:
    return CodecSettings(
        compression=args.compression,
        enable_tidb_extension=not args.no_tidb_extension,
        claim_check=ClaimCheckStore(args.claim_check_root) if args.claim_check_root else None,
        schema_source=_schema_source(args),
        options=_options(args.option),
    )


def _run_decode(args) -> int:
    decoder = make_decoder(args.protocol, decode_settings(args))
    errors = 0
    records = events = 0
    out = sys.stdout.buffer
    chunk: list[bytes] = []

    def report(error: TicdcLakeError) -> None:
        nonlocal errors
        errors += 1
        print(f"error: {error}", file=sys.stderr)

    for _, _, decoded in exports.decode_exports(args.files, decoder, on_error=report):
        records += 1
        for event in decoded:
            chunk.append(orjson.dumps(to_json_dict(event), option=orjson.OPT_APPEND_NEWLINE))
        events += len(decoded)
        if len(chunk) >= 1024:
            out.write(b"".join(chunk))
            chunk.clear()
    out.write(b"".join(chunk))
    out.flush()
    print(
        f"decoded {records} records into {events} events; {errors} could not be read or decoded",
        file=sys.stderr,
    )
    return 1 if errors else 0


# --- generate ---------------------------------------------------------------------------------


def _add_generate(commands) -> None:
    generate = commands.add_parser(
        "generate",
        help="write a simulated TiDB workload as TiCDC Kafka export files",
        description="Generate a seeded TiDB workload, dispatch it to Kafka partitions as TiCDC "
        "does, encode it with PROTOCOL and write export files, manifest.json (expected table "
        "contents at each resolved TS), expected.jsonl and pipeline.yaml under --out.",
    )
    generate.add_argument("--out", required=True, type=Path)
    generate.add_argument("--protocol", required=True, choices=PROTOCOLS)
    generate.add_argument("--partitions", type=int, default=4)
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--transactions", type=int, default=200)
    generate.add_argument("--format", default="parquet", choices=exports.FORMATS)
    generate.add_argument("--compression", default="none", choices=CODECS)
    generate.add_argument("--file-compression", default="none", choices=exports.FILE_COMPRESSIONS)
    generate.add_argument("--dispatcher", default="index-value", choices=DISPATCHERS)
    generate.add_argument(
        "--idle-partitions",
        type=int,
        default=1,
        help="partitions that get no rows, only resolved and DDL events (default 1)",
    )
    generate.add_argument("--replays", type=int, default=3, help="at-least-once replays")
    generate.add_argument("--no-tidb-extension", action="store_true")
    generate.add_argument(
        "--avro-watermarks",
        action="store_true",
        help="Avro: TiCDC's test-only DDL and checkpoint messages (avro-enable-watermark)",
    )
    generate.set_defaults(run=_run_generate)


def _run_generate(args) -> int:
    options = GenerateOptions(
        protocol=args.protocol,
        partitions=args.partitions,
        seed=args.seed,
        transactions=args.transactions,
        layout=args.format,
        compression=args.compression,
        file_compression=args.file_compression,
        dispatcher=args.dispatcher,
        idle_partitions=min(args.idle_partitions, args.partitions - 1),
        replays=args.replays,
        tidb_extension=not args.no_tidb_extension,
        avro_watermarks=args.avro_watermarks,
    )
    started = time.perf_counter()
    generated = write_generated(args.out, options)
    seconds = time.perf_counter() - started
    counts = generated.manifest["counts"]
    print(
        f"{args.protocol}: {counts['transactions']} transactions, {counts['row_events']} row "
        f"events, {counts['ddl_events']} DDLs, {counts['resolved_points']} resolved TSs -> "
        f"{counts['messages']} Kafka messages ({counts['replayed_messages']} replayed), "
        f"{counts['export_bytes']} bytes in {seconds:.1f} s"
    )
    for path in generated.export_files:
        print(f"  {path}")
    print(f"  {generated.out_dir / 'manifest.json'}")
    print(f"  {generated.config_path}")
    return 0


# --- demo -------------------------------------------------------------------------------------


def _add_demo(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="generate a sample in every protocol, decode it back and check it",
        description="Until the pipeline exists: generate one sample workload in every "
        "protocol under --out, decode the files back and compare the events with the "
        "generator's, up to what each protocol loses.",
    )
    demo.add_argument("--out", type=Path, default=Path("sample"))
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--transactions", type=int, default=200)
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--protocol", action="append", choices=PROTOCOLS, dest="protocols")
    demo.set_defaults(run=_run_demo)


def _run_demo(args) -> int:
    protocols = tuple(args.protocols or PROTOCOLS)
    print(
        f"Generating {args.transactions} transactions (seed {args.seed}) in "
        f"{', '.join(protocols)} under {args.out}/ and decoding them back..."
    )
    reports = run_demo(
        args.out,
        protocols=protocols,
        seed=args.seed,
        transactions=args.transactions,
        partitions=args.partitions,
    )
    for report in reports:
        kinds = Counter(report.events)
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        verdict = "MATCHES the generated events" if report.matched else "DOES NOT MATCH"
        print(f"\n{report.protocol}: {verdict}")
        print(f"  messages: {report.messages}")
        print(f"  events:   {summary or 'none'}")
        print(f"  errors:   {len(report.errors)}")
        print(f"  files:    {report.out_dir}/ (exports/, manifest.json, pipeline.yaml)")
        for line in report.errors[:5] + report.problems[:5]:
            print(f"  ! {line}")
    failed = [report.protocol for report in reports if not report.matched]
    print(
        "\nAll protocols decode to the generated events."
        if not failed
        else f"\nMismatches in: {', '.join(failed)}"
    )
    return 1 if failed else 0
