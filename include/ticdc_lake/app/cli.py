"""`ticdc-lake`: run the pipeline, run the demo, decode Kafka exports, generate a sample.

    ticdc-lake run --config FILE [--stages land,decode,watermark,compact] [--changefeed NAME ...]
                   [--until-ts TSO] [--rebuild] [--json] [--lock-wait SECONDS] [--spark-ui]
    ticdc-lake demo [--out DIR] [--profile realistic|ddl-heavy] [--seed S] [--transactions T]
                    [--partitions N] [--protocol P ...] [--spark-ui]

    ticdc-lake decode --protocol P [--compression C] [--schema-dir D | --schema-registry URL
                      | --schemas-topic FILE] [--schema S] [--column-type T.C=TYPE ...]
                      [--claim-check-root R ...] [--no-tidb-extension] FILE...
    ticdc-lake generate --out DIR --protocol P [--profile realistic|ddl-heavy] [--partitions N]
                        [--seed S] [--transactions T] [--format F] [--compression C]
                        [--file-compression Z] ...
    ticdc-lake airflow [--home .airflow] [--port 8080] [--log-port 8793] [--spark-master local[*]]
                       [--configs P] [--database-url URL] [--parallelism N]

The work happens in the library (pipeline, demo, exports, protocols, workload); this module
parses arguments and prints, all of it through terminal.printing (control characters escaped,
credentials masked). ``main(argv, spark=session)`` runs `run` and `demo` on a given
SparkSession instead of building one (tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import orjson

from ticdc_lake.app.terminal import printing
from ticdc_lake.bronze import exports
from ticdc_lake.compression import CODECS
from ticdc_lake.config import SchemaRegistryConfig, TopicConfig, absolute_root
from ticdc_lake.errors import ConfigError, DecodeError, TicdcLakeError
from ticdc_lake.lake.lock import add_lock_wait, lake_lock
from ticdc_lake.orchestration import LOG_SERVER_PORT
from ticdc_lake.protocols import PROTOCOLS, Decoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.redact import warn_if_url_has_password
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.sample.workload.dispatch import DISPATCHERS
from ticdc_lake.sample.workload.generator import DEFAULT_PROFILE, PROFILES
from ticdc_lake.sample.workload.output import GenerateOptions
from ticdc_lake.sample.workload.streaming import stream_generated
from ticdc_lake.silver.codecs import topic_decoder
from ticdc_lake.silver.events import Event, json_value, to_json_dict

_OUTPUT_CHUNK = 1 << 16


def run() -> NoReturn:
    """The ``ticdc-lake`` command: ``main``, then an exit that skips the interpreter's teardown
    (process_exit.py says why)."""
    exit_now(main())


def main(argv: list[str] | None = None, *, spark=None) -> int:
    """Run one command. Everything it prints (its output, its errors, argparse's usage, the
    library's warnings) goes through terminal.printing: control characters escaped,
    credentials masked."""
    with printing():
        parser = _parser()
        args = parser.parse_args(argv)
        args.spark = spark
        try:
            return args.run(args)
        except ConfigError as exc:
            print(f"ticdc-lake: configuration error: {exc}", file=sys.stderr)
            return 2
        except TicdcLakeError as exc:  # e.g. a schema registry that cannot be reached
            print(f"ticdc-lake: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:  # `ticdc-lake decode ... | head`
            sys.stderr.close()
            return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ticdc-lake", description="TiCDC Kafka exports to Delta tables: tools."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands)
    _add_demo(commands)
    _add_decode(commands)
    _add_generate(commands)
    _add_airflow(commands)
    _add_dq_report(commands)
    _add_dq_relayout(commands)
    _add_query(commands)
    _add_backfill(commands)
    _add_java_options(commands)
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
        "--schema", help="Avro up to TiCDC v6.0: the upstream schema its records do not name"
    )
    decode.add_argument(
        "--column-type",
        action="append",
        default=[],
        metavar="TABLE.COLUMN=TYPE",
        help="Avro up to TiCDC v6.0: a column's type its Avro type cannot tell (repeatable)",
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


def _column_types(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    found = []
    for pair in pairs:
        column, equals, type_text = pair.partition("=")
        if not equals or "." not in column or not type_text:
            raise ConfigError(f"--column-type wants TABLE.COLUMN=TYPE, not {pair!r}")
        found.append((column, type_text))
    return tuple(found)


def decode_topic(args) -> TopicConfig:
    """The command line's settings as a topic's, for the same factory the pipeline uses."""
    registry = None
    if args.schema_registry:
        registry = SchemaRegistryConfig(
            args.schema_registry, args.schema_registry_user, args.schema_registry_password_env
        )
        warn_if_url_has_password(args.schema_registry, "--schema-registry")
    topic = TopicConfig(
        name="(command line)",
        protocol=args.protocol,
        compression=args.compression,
        enable_tidb_extension=not args.no_tidb_extension,
        schema_dir=Path(args.schema_dir) if args.schema_dir else None,
        schemas_topic=Path(args.schemas_topic) if args.schemas_topic else None,
        schema_registry=registry,
        claim_check_roots=tuple(absolute_root(root, Path.cwd()) for root in args.claim_check_root),
        options=_options(args.option),
        schema=args.schema,
        column_types=_column_types(args.column_type),
    )
    if topic.protocol == "avro" and not (registry or topic.schema_dir or topic.schemas_topic):
        raise ConfigError("avro needs --schema-dir, --schema-registry or --schemas-topic")
    return topic


def decode_exports(
    paths: Iterable[str | os.PathLike],
    decoder: Decoder,
    *,
    on_error: Callable[[TicdcLakeError], None],
) -> Iterator[tuple[str, KafkaRecord, list[Event]]]:
    """(path, record, events) for every record that decodes; every unreadable line and every
    record that does not decode goes to `on_error` (an ExportError, or a DecodeError naming the
    file, topic, partition and offset), and decoding goes on with the next record."""
    limits = decoder.settings.limits
    for path, record in exports.read_exports(paths, on_error=on_error, limits=limits):
        try:
            events = decoder.decode(record)
        except DecodeError as exc:
            on_error(exc.located(source_file=path))
            continue
        yield path, record, events


def _run_decode(args) -> int:
    decoder = topic_decoder(decode_topic(args))
    errors = 0
    records = events = 0
    out = sys.stdout.buffer
    chunk: list[bytes] = []

    def report(error: TicdcLakeError) -> None:
        nonlocal errors
        errors += 1
        print(f"error: {error}", file=sys.stderr)

    for path, record, decoded in decode_exports(args.files, decoder, on_error=report):
        try:
            lines = [_json_line(event) for event in decoded]
        except _UNPRINTABLE as exc:
            report(_unprintable(exc, decoded, args.protocol, record, path))
            continue
        chunk += lines
        records += 1
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


# What printing an event raises when a value has no JSON form: orjson's TypeError for an
# integer past 64 bits, nesting past 255 levels or a type it does not know.
_UNPRINTABLE = (TypeError, ValueError, RecursionError)


def _json_line(event: Event) -> bytes:
    return orjson.dumps(
        to_json_dict(event), default=_nested_json_value, option=orjson.OPT_APPEND_NEWLINE
    )


def _nested_json_value(value: Any) -> Any:
    """Bytes inside a nested (Avro record) value get the same JSON form as a column's bytes."""
    if isinstance(value, bytes):
        return json_value(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _unprintable(
    exc: Exception, events: list[Event], protocol: str, record: KafkaRecord, path: str
) -> DecodeError:
    """The error of a record one of whose events has no JSON form; none of them is printed."""
    kinds = sorted({event.kind for event in events})
    return DecodeError(
        f"its {'/'.join(kinds)} event cannot be printed as JSON: {type(exc).__name__}: {exc}",
        protocol=protocol,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        source_file=path,
    )


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
    _add_profile(generate)
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
    generate.add_argument(
        "--replays",
        type=int,
        default=None,
        help="at-least-once replays (default: 3 for ddl-heavy, ~1%% of row events for realistic)",
    )
    generate.add_argument(
        "--tenants",
        type=int,
        default=1,
        help="realistic: the shop's six tables once per tenant schema (shop, shop_2, ...), "
        "as a SaaS database holds them (default 1)",
    )
    generate.add_argument("--no-tidb-extension", action="store_true")
    generate.add_argument(
        "--avro-watermarks",
        action="store_true",
        help="Avro: TiCDC's test-only DDL and checkpoint messages (avro-enable-watermark)",
    )
    generate.add_argument(
        "--avro-layout",
        default="current",
        choices=("current", "2022"),
        help="Avro: 2022 writes as TiCDC up to v6.0 did (with --no-tidb-extension)",
    )
    generate.set_defaults(run=_run_generate)


def _run_generate(args) -> int:
    try:
        options = _generate_options(args)
    except ValueError as exc:  # an option out of range: a usage error, not a crash
        raise ConfigError(f"generate: {exc}") from None
    started = time.perf_counter()
    generated = stream_generated(args.out, options)
    seconds = time.perf_counter() - started
    counts = generated.manifest["counts"]
    print(
        f"{args.protocol}: {counts['transactions']} transactions ({args.profile} profile), "
        f"{counts['row_events']} row events, {counts['ddl_events']} DDLs, "
        f"{counts['resolved_points']} resolved TSs -> "
        f"{counts['messages']} Kafka messages ({counts['replayed_messages']} replayed), "
        f"{counts['export_bytes']} bytes in {seconds:.1f} s"
    )
    for path in generated.export_files:
        print(f"  {path}")
    print(f"  {generated.out_dir / 'manifest.json'}")
    print(f"  {generated.config_path}")
    return 0


def _generate_options(args) -> GenerateOptions:
    return GenerateOptions(
        protocol=args.protocol,
        profile=args.profile,
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
        avro_layout=args.avro_layout,
        tenants=args.tenants,
    )


def _add_profile(parser) -> None:
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        choices=PROFILES,
        help="realistic (default): a growing shop with plausible values and a few ALTERs; "
        "ddl-heavy: small churned tables, every type's extreme values, a DDL per ~200 "
        "transactions (the tests' workload)",
    )


# --- run and demo ----------------------------------------------------------------------------


# Spark and the stages are imported by the commands that use them: decode and generate start
# without loading pyspark.


def _session(args, name: str):
    """The session handed to main(), else a local one built on first use (spark-submit
    settings, if any, win), listening on 127.0.0.1 only, with the web UI if --spark-ui."""
    if args.spark is not None:
        return args.spark
    from ticdc_lake.runtime.spark import LazySession, build_session

    return LazySession(lambda: build_session(name, ui=args.spark_ui))


def _add_spark_ui(parser) -> None:
    parser.add_argument(
        "--spark-ui",
        action="store_true",
        help="serve Spark's web UI while it runs, on 127.0.0.1:4040 (or $SPARK_LOCAL_IP); "
        "off by default: it has no login",
    )


def _add_run(commands) -> None:
    run = commands.add_parser(
        "run",
        help="run the pipeline stages on local Spark",
        description="Run the chosen stages (default: all) of the pipeline described by --config "
        "in pipeline order: land (export files -> bronze), decode (bronze -> silver), "
        "watermark (resolved events -> watermarks), compact (silver -> gold up to each "
        "changefeed's watermark). Prints a summary; exit status 1 when a stage reports "
        "failures or another run holds the lake past --lock-wait, 2 on a configuration error.",
    )
    run.add_argument("--config", required=True, type=Path, help="the pipeline config (YAML)")
    run.add_argument(
        "--stages",
        help="comma-separated stage names (land, decode, watermark, compact) in any order; "
        "they run in pipeline order (default: all)",
    )
    run.add_argument(
        "--changefeed",
        action="append",
        dest="changefeeds",
        metavar="NAME",
        help="compact only this changefeed (repeatable; default: every changefeed)",
    )
    run.add_argument("--until-ts", type=int, metavar="TSO", help="compact no further than this TS")
    run.add_argument(
        "--rebuild",
        action="store_true",
        help="compact: empty the changefeeds' gold tables and apply silver again",
    )
    run.add_argument(
        "--no-quality",
        dest="quality",
        action="store_false",
        help="skip the data-quality checks that follow land, decode and compact",
    )
    run.add_argument("--json", action="store_true", help="print one JSON object, not the summary")
    add_lock_wait(run)
    _add_spark_ui(run)
    run.set_defaults(run=_run_pipeline)


def _run_pipeline(args) -> int:
    from ticdc_lake.app.pipeline import STAGES, pipeline_order, render_summary, run_stages
    from ticdc_lake.config import load_config

    config = load_config(args.config)
    # Left out: every stage; given, even empty, it must name one (`--stages ''` from a script
    # whose variable was unset must not run the whole pipeline).
    stages = pipeline_order(STAGES if args.stages is None else args.stages.split(","))
    # The lock before the session: a run waiting for the lake holds no Spark resources.
    with lake_lock(config.lake, args.lock_wait):
        result = run_stages(
            _session(args, "ticdc-lake-run"),
            config,
            stages,
            changefeeds=args.changefeeds,
            until_ts=args.until_ts,
            rebuild=args.rebuild,
            quality=args.quality,
        )
    print(json.dumps(result.to_dict()) if args.json else render_summary(result))
    return 1 if result.failed else 0


def _add_airflow(commands) -> None:
    airflow = commands.add_parser(
        "airflow",
        help="run a local Airflow with the project's DAGs until Ctrl-C",
        description="Start Airflow (api-server, scheduler, dag-processor, task log server, "
        "triggerer) from its own AIRFLOW_HOME with the LocalExecutor, every one listening on "
        "127.0.0.1 only, the project's dags/ and plugins/, and spark_default pointing at "
        "--spark-master. The metadata database is SQLite in AIRFLOW_HOME unless "
        "--database-url (or TICDC_LAKE_AIRFLOW_DB) names another. Prints the UI's URL and the "
        "admin login; Ctrl-C stops everything it started.",
    )
    airflow.add_argument("--home", type=Path, default=Path(".airflow"), help="AIRFLOW_HOME")
    airflow.add_argument("--port", type=int, default=8080)
    airflow.add_argument(
        "--log-port",
        type=int,
        default=LOG_SERVER_PORT,
        help=f"the task log server's port, on 127.0.0.1 (default {LOG_SERVER_PORT})",
    )
    airflow.add_argument(
        "--spark-master",
        default="local[*]",
        help="spark_default's master: local[N], or spark://HOST:PORT of a standalone cluster",
    )
    airflow.add_argument(
        "--database-url",
        help="the metadata database's SQLAlchemy URL, e.g. "
        "postgresql+psycopg2://airflow:PASSWORD@127.0.0.1:5432/airflow (or without the password "
        "and PGPASSWORD set); default TICDC_LAKE_AIRFLOW_DB, else SQLite in --home. The password "
        "is never printed; prefer the variable to the flag, which other users see in ps",
    )
    airflow.add_argument(
        "--parallelism",
        type=int,
        help="tasks at once (default 2 on SQLite, 4 on another database)",
    )
    airflow.add_argument(
        "--configs", type=Path, help="a pipeline config or a folder of them (default: the demo)"
    )
    airflow.add_argument(
        "--project", type=Path, default=Path("."), help="the folder holding dags/ and spark_jobs/"
    )
    airflow.set_defaults(run=_run_airflow)


def _run_airflow(args) -> int:
    from ticdc_lake.airflow.airflow_local import (
        DATABASE_ENV,
        LocalAirflowSettings,
        database_url,
        default_parallelism,
        serve,
    )

    given = args.database_url or os.environ.get(DATABASE_ENV)
    database = database_url(given) if given else None
    project = args.project.resolve()
    if not (project / "dags").is_dir():
        raise ConfigError(f"{project} has no dags/ folder: run from the project or give --project")
    settings = LocalAirflowSettings(
        home=args.home.resolve(),
        project=project,
        port=args.port,
        log_port=args.log_port,
        spark_master=args.spark_master,
        parallelism=args.parallelism or default_parallelism(database),
        configs=args.configs,
        database_url=database,
    )
    return serve(settings)


def _add_dq_report(commands) -> None:
    report = commands.add_parser(
        "dq-report",
        help="the lake's data-quality summary: watermarks, lag, gold, the last checks",
        description="Read the lake (no Spark): each changefeed's watermark, lag and stuck "
        "partitions, the gold tables with the TS each reflects and its mode, quarantine "
        "counts, and the last data-quality validation of every stage, failures first. Exit "
        "status 1 when the last validation of a stage failed a check whose policy is fail. "
        "Also writes the HTML report (<reports>/quality.html) and prints its path.",
    )
    report.add_argument("--config", required=True, type=Path, help="the pipeline config (YAML)")
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.set_defaults(run=_run_dq_report)


def _run_dq_report(args) -> int:
    from ticdc_lake.config import load_config
    from ticdc_lake.quality.lakeview import lake_view
    from ticdc_lake.quality.report import write_report
    from ticdc_lake.quality.summary import render_summary

    config = load_config(args.config)
    view = lake_view(config)
    report = write_report(config, view)
    if args.json:
        print(json.dumps(view.to_dict() | {"report": str(report)}, default=str))
    else:
        print(render_summary(view))
        print(f"Report: {report}")
    return 1 if view.failed_stages else 0


def _add_dq_relayout(commands) -> None:
    relayout = commands.add_parser(
        "dq-relayout",
        help="move a quality/results table an older version wrote to this version's layout",
        description="Rewrite the lake's quality/results, if an older version created it (one "
        "file per validation, unpartitioned), partitioned by stage and month as this version "
        "writes it, so that the report, dq-report and the Airflow page read a few files of "
        "it. Every row and each stage's record of what it validated are kept; the old table "
        "is renamed results.before-relayout-<time> beside it (delete it when satisfied). "
        "Holds the lake's lock: no quality job appends meanwhile.",
    )
    relayout.add_argument("--config", required=True, type=Path, help="the pipeline config (YAML)")
    add_lock_wait(relayout)
    relayout.set_defaults(run=_run_dq_relayout)


def _run_dq_relayout(args) -> int:
    from ticdc_lake.config import load_config
    from ticdc_lake.lake.layout import LakeLayout
    from ticdc_lake.quality.store import relayout_results

    config = load_config(args.config)
    layout = LakeLayout(config.lake)
    with lake_lock(config.lake, args.lock_wait):
        done = relayout_results(layout)
    if done is None:
        print(f"{layout.quality_results}: nothing to do (none yet, or this version's layout)")
    else:
        print(f"{layout.quality_results}: {done.rows:,} rows from {done.files_before:,} files "
              f"into {done.files_after:,}, partitioned by stage and month; the old table is "
              f"at {done.kept_at}")  # fmt: skip
    return 0


def _add_query(commands) -> None:
    query = commands.add_parser(
        "query",
        help="a gold table as of a TSO or time (no Spark)",
        description="Read gold table --table as it was when its changefeed's gold reflected "
        "the largest TS at or below --as-of (a TSO or an ISO-8601 time with a zone): the "
        "Delta version its state names, read with delta-rs. Prints the version, the TS it "
        "reflects and the Spark SQL that reads the same (VERSION AS OF n), then the rows. "
        "Exit status 1, saying why, for a TS above the watermark, older than the table's "
        "retained history, or a table with no consistent state.",
    )
    query.add_argument("--config", required=True, type=Path, help="the pipeline config (YAML)")
    query.add_argument("--table", required=True, help="schema.table (`a.b`.c where quoted)")
    query.add_argument("--as-of", required=True, help="a TSO or an ISO-8601 time with a zone")
    shape = query.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON object, rows included")
    shape.add_argument("--csv", action="store_true", help="the rows as CSV (with a header)")
    query.set_defaults(run=_run_query)


def _run_query(args) -> int:
    from ticdc_lake.config import load_config
    from ticdc_lake.gold.as_of import read_as_of, version_as_of
    from ticdc_lake.lake.layout import LakeLayout
    from ticdc_lake.lake.names import split_name
    from ticdc_lake.orchestration import BackfillParamError, parse_ts

    try:
        schema, table = split_name(args.table)
        tso = parse_ts(args.as_of, "as-of")
    except (ValueError, BackfillParamError) as exc:
        raise ConfigError(str(exc)) from None
    config = load_config(args.config)
    as_of = version_as_of(LakeLayout(config.lake), schema, table, tso)
    rows = read_as_of(as_of)
    if args.csv:
        rows.to_pandas().to_csv(sys.stdout, index=False)
        return 0
    about = {
        "table": args.table,
        "as_of": tso,
        "version": as_of.version,
        "reflects": as_of.watermark,
        "path": as_of.path,
        "spark_sql": as_of.spark_sql,
    }
    if args.json:
        print(json.dumps(about | {"rows": rows.to_pylist()}, default=str))
        return 0
    print(f"{args.table} as of TS {tso}: gold version {as_of.version}, reflecting TS "
          f"{as_of.watermark} ({rows.num_rows:,} rows)")  # fmt: skip
    print(f"Spark SQL: {as_of.spark_sql}")
    print(rows.to_pandas().to_string(max_rows=50, index=False))
    return 0


def _add_backfill(commands) -> None:
    backfill = commands.add_parser(
        "backfill",
        help="re-derive silver and rebuild gold for a TS range (the backfill DAG's job)",
        description="The job the ticdc_lake_backfill DAG runs, on local Spark: re-derive silver "
        "from bronze for the bronze batches touching [--start-ts, --end-ts] (each a TSO or an "
        "ISO-8601 time with a zone) and rebuild the touched changefeeds' gold to exactly the "
        "watermark. A backfill that already ran on an unchanged lake writes nothing. Exit "
        "status 2 for a bad range or table, 1 when a stage fails.",
    )
    backfill.add_argument("--config", required=True, type=Path, help="the pipeline config")
    backfill.add_argument("--start-ts", required=True, help="a TSO or an ISO-8601 time")
    backfill.add_argument("--end-ts", required=True, help="a TSO or an ISO-8601 time (inclusive)")
    backfill.add_argument(
        "--tables", nargs="+", default=(), metavar="SCHEMA.TABLE",
        help="only these gold tables' changefeeds (default: every one the range touches)",
    )  # fmt: skip
    backfill.add_argument("--dry-run", action="store_true", help="say what would be done, only")
    backfill.add_argument("--json", action="store_true", help="print one JSON object")
    _add_spark_ui(backfill)
    backfill.set_defaults(run=_run_backfill)


def _run_backfill(args) -> int:
    from ticdc_lake.config import load_config
    from ticdc_lake.orchestration import BackfillParamError, parse_ts

    try:
        start_ts = parse_ts(args.start_ts, "start_ts")
        end_ts = parse_ts(args.end_ts, "end_ts", end=True)
        config = load_config(args.config)
        from ticdc_lake.backfill.run import run_backfill

        result = run_backfill(_session(args, "ticdc-lake-backfill"), config, start_ts, end_ts,
                              args.tables, dry_run=args.dry_run)  # fmt: skip
    except BackfillParamError as exc:
        raise ConfigError(str(exc)) from None
    print(json.dumps(result.to_dict(), default=str) if args.json else str(result))
    return 1 if result.compact is not None and result.compact.failures else 0


def _add_java_options(commands) -> None:
    options = commands.add_parser(
        "java-options",
        help="the driver JVM options the DAGs give spark-submit, for a spark-submit of your own",
        description="Print the driver JVM options the DAGs give each job's spark-submit and "
        "the sessions ticdc-lake starts get (the parallel collector, C1 only, and this "
        "environment's class archive; TICDC_LAKE_DRIVER_JAVA_OPTIONS replaces them), e.g. "
        'spark-submit --conf "spark.driver.extraJavaOptions=$(ticdc-lake java-options)" '
        "spark_jobs/land.py --config pipeline.yaml",
    )
    options.set_defaults(run=_run_java_options)


def _run_java_options(args) -> int:
    from ticdc_lake.orchestration import driver_java_options

    print(driver_java_options(os.environ, sys.executable))
    return 0


def _add_demo(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="generate a sample in every protocol, run every stage on it and check gold",
        description="Generate a seeded sample workload in every protocol under --out/<protocol>/ "
        "(reused when it was generated with the same options), run land, decode, watermark "
        "and compact over each with their data-quality checks, print what every stage and "
        "check did, the watermarks and the gold "
        "tables, and check gold against the generator's tables at the watermark. Exit status "
        "1 when gold does not match.",
    )
    demo.add_argument("--out", type=Path, default=Path("sample"))
    _add_profile(demo)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--transactions", type=int, default=200)
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--protocol", action="append", choices=PROTOCOLS, dest="protocols")
    _add_spark_ui(demo)
    demo.set_defaults(run=_run_demo)


def _run_demo(args) -> int:
    from ticdc_lake.app.demo import prepare_sample, render_demo, run_sample

    started = time.perf_counter()
    protocols = tuple(dict.fromkeys(args.protocols or PROTOCOLS))
    out = args.out.resolve()
    print(
        f"Sample workload: {args.transactions} transactions ({args.profile}, seed {args.seed}), "
        f"{args.partitions} Kafka partitions per topic, in {', '.join(protocols)}, under {out}/"
    )
    samples = [
        prepare_sample(
            out,
            protocol,
            profile=args.profile,
            seed=args.seed,
            transactions=args.transactions,
            partitions=args.partitions,
        )
        for protocol in protocols
    ]
    spark = _session(args, "ticdc-lake-demo")
    reports = []
    for sample in samples:
        print(
            f"Running land, decode, watermark, compact and their checks over {sample.protocol}...",
            flush=True,
        )
        reports.append(run_sample(spark, sample))
    print(render_demo(reports, time.perf_counter() - started))
    return 0 if all(report.matched for report in reports) else 1
