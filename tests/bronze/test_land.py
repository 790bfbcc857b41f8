"""Land: export files → bronze. Every export format, idempotent reruns, re-exports with
overlapping offsets and conflicting bytes, malformed lines, offset gaps, changed files, and a
run killed between its commits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.bronze import export_source, exports
from ticdc_lake.bronze.land import (
    LandError,
    LandTables,
    discover_files,
    land,
    merge_runs,
    overlap_windows,
)
from ticdc_lake.bronze.land_batch import BatchCommits
from ticdc_lake.config import load_config
from ticdc_lake.errors import ConfigError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.limits import Limits
from ticdc_lake.records import KafkaRecord

from tests.bronze.test_exports import parquet_with_a_large_row_group

# --- fixtures and helpers ---------------------------------------------------------------------


def retopic(records, topic: str) -> list[KafkaRecord]:
    return [dataclasses.replace(r, topic=topic) for r in records]


def write_config(root: Path, topics) -> Path:
    document = {
        "lake": "lake",
        "inputs": ["landing/*"],
        "topics": {topic: {"protocol": "open-protocol", "partitions": 3} for topic in topics},
    }
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document))
    (root / "landing").mkdir(exist_ok=True)
    return path


def table(path: Path) -> list[dict]:
    """A table's rows read with plain deltalake (what any Delta reader sees)."""
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def versions(tables: LandTables) -> dict[str, int | None]:
    return {
        path.name: DeltaTable(str(path)).version() if DeltaTable.is_deltatable(str(path)) else None
        for path in tables.committed()
    }


def millis(stamp: dt.datetime | None) -> int | None:
    return (
        None
        if stamp is None
        else (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // (dt.timedelta(milliseconds=1))
    )


def bronze_records(tables: LandTables) -> dict[tuple, tuple]:
    """(topic, partition, offset) → (key, value, timestamp ms, headers), asserting each
    coordinate is in bronze once."""
    rows = table(tables.bronze)
    found = {}
    for row in rows:
        coordinates = (row["topic"], row["partition"], row["offset"])
        assert coordinates not in found, f"{coordinates} landed twice"
        headers = tuple((h["key"], h["value"]) for h in row["headers"])
        found[coordinates] = (row["key"], row["value"], millis(row["timestamp"]), headers)
    return found


def expected(records) -> dict[tuple, tuple]:
    return {
        (r.topic, r.partition, r.offset): (r.key, r.value, r.timestamp_ms, tuple(r.headers))
        for r in records
    }


class SimulatedKill(BaseException):
    """Not an Exception: like a kill, no ``except Exception`` on the way may handle it."""


def set_mtime(path: Path, seconds: int) -> None:
    """Distinct modification times: the planned order of files (oldest first) is the tie-break
    between copies of one record, and must not depend on how fast the test wrote them."""
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))


# --- every export format ----------------------------------------------------------------------

FORMATS = [
    ("parquet", "none"),
    ("jsonl", "none"),
    ("kcat", "none"),
    ("jsonl", "gz"),
    ("parquet", "zstd"),
    ("kcat", "zstd"),
    ("avro", "none"),
]


@pytest.fixture(scope="module")
def formats(spark, generated, tmp_path_factory):
    """One landing area holding the workload once per format, each under its own topic."""
    root = tmp_path_factory.mktemp("formats")
    sources = {}
    for layout, compression in FORMATS:
        topic = f"fmt-{layout}-{compression}"
        records = [
            # Headers on some records, with bytes that are not UTF-8.
            dataclasses.replace(r, headers=(("origin", b"\xff\x00x"), ("empty", None)))
            if r.offset % 7 == 3
            else r
            for partition in sorted(generated)
            for r in retopic(generated[partition], topic)
        ]
        sources[topic] = records
        name = exports.export_file_name(topic, layout, compression)
        exports.write_export(root / "landing" / name, records, layout, file_compression=compression)
    config = load_config(write_config(root, sources))
    tables = LandTables.of(LakeLayout(config.lake))
    first = land(spark, config)
    after_first = versions(tables)
    second = land(spark, config)
    return {
        "config": config,
        "tables": tables,
        "sources": sources,
        "first": first,
        "second": second,
        "versions": (after_first, versions(tables)),
    }


@pytest.mark.spark
def test_every_format_lands_every_record_exactly(formats):
    first = formats["first"]
    total = sum(len(records) for records in formats["sources"].values())
    assert (first.batch_id, first.files_seen, first.files_landed) == (1, len(FORMATS), len(FORMATS))
    assert (first.records_read, first.records_added) == (total, total)
    assert (first.duplicates, first.conflicts, first.errors) == (0, 0, 0)
    assert (first.offset_gaps, first.missing_offsets) == (0, 0)
    landed = bronze_records(formats["tables"])
    for topic, records in formats["sources"].items():
        mine = {k: v for k, v in landed.items() if k[0] == topic}
        assert mine == expected(records), topic


@pytest.mark.spark
def test_bronze_rows_carry_their_batch_and_file(formats):
    tables = formats["tables"]
    rows = table(tables.bronze)
    assert {row["batch_id"] for row in rows} == {1}
    assert len({row["landed_at"] for row in rows}) == 1
    by_topic = {row["topic"]: row["source_file"] for row in rows}
    for topic, path in by_topic.items():
        layout, compression = topic.split("-")[1:]
        assert Path(path).name == exports.export_file_name(topic, layout, compression)
    # Parquet, Avro and kcat exports say the Kafka timestamp type; our JSON Lines only when
    # the record has one (the generator's records do not).
    types = {(row["topic"], row["timestamp_type"]) for row in rows}
    said = {topic: 0 for topic in by_topic} | {"fmt-jsonl-none": None, "fmt-jsonl-gz": None}
    assert types == set(said.items())
    # Partitioned by topic, as documented.
    assert DeltaTable(str(tables.bronze)).metadata().partition_columns == ["topic"]


@pytest.mark.spark
def test_landed_files_table(formats):
    rows = table(formats["tables"].landed_files)
    assert len(rows) == len(FORMATS)
    for row in rows:
        stat = os.stat(row["path"])
        assert row["size"] == stat.st_size
        assert millis(row["modification_time"]) == stat.st_mtime_ns // 10**6
        assert row["batch_id"] == 1
        assert row["records_read"] == row["records_added"] > 0
        assert row["duplicates"] == row["conflicts"] == row["errors"] == 0
    layouts = {(r["layout"], r["file_compression"]) for r in rows}
    # kcat lines are JSON Lines to the reader.
    assert layouts == {("parquet", "none"), ("jsonl", "none"), ("jsonl", "gz"),
                       ("parquet", "zstd"), ("jsonl", "zstd"), ("avro", "none")}  # fmt: skip


@pytest.mark.spark
def test_rerun_adds_nothing_and_no_delta_version(formats):
    second = formats["second"]
    assert second.batch_id is None
    assert (second.files_seen, second.files_skipped, second.files_landed) == (7, 7, 0)
    assert second.records_read == second.records_added == 0
    before, after = formats["versions"]
    assert before == after
    # Nothing was planned and left behind.
    assert not formats["tables"].plan.exists()


# --- one landing area over several runs ----------------------------------------------------------

TOPIC = "orders"


@pytest.fixture(scope="module")
def story(spark, generated, tmp_path_factory):
    """The life of one landing area, run by run; each step's result and tables are kept.

    1. first.parquet: partition 0 without offsets 5..7, partition 1's first half;
       bad.jsonl: partition 2 but its last 3 records, with a line that is not JSON and one with
       bad base64 among them.
    2. reexport.kcat.jsonl: partition 0 from offset 10 (offset 12 with other bytes) plus
       offset 6 twice; partition 1's second half, its first record again with other bytes.
    3. first.parquet rewritten in place with offsets 5 and 7 added.
    4. late.parquet (partition 2's last 3) — killed after the bronze commit; later.jsonl
       arrives; the next run finishes batch 4, the one after lands later.jsonl.
    """
    root = tmp_path_factory.mktemp("story")
    config = load_config(write_config(root, [TOPIC]))
    tables = LandTables.of(LakeLayout(config.lake))
    landing = root / "landing"
    p0, p1, p2 = (retopic(generated[p], TOPIC) for p in (0, 1, 2))
    half = len(p1) // 2
    steps = {}

    def run(name):
        result = land(spark, config)
        steps[name] = {
            "result": result,
            "bronze": bronze_records(tables),
            "versions": versions(tables),
            "gaps": table(tables.offset_gaps) if tables.offset_gaps.exists() else [],
        }
        return result

    # 1
    exports.write_export(
        landing / "first.parquet", [r for r in p0 if not 5 <= r.offset <= 7] + p1[:half], "parquet"
    )
    set_mtime(landing / "first.parquet", 1_000)
    exports.write_export(landing / "bad.jsonl", p2[:-3], "jsonl")
    text = (landing / "bad.jsonl").read_bytes().splitlines(keepends=True)
    text.insert(2, b'{"topic": "orders", "partition": 2, "offset": 99, "key_b64": \n')
    text.insert(
        5, b'{"topic":"orders","partition":2,"offset":98,"key_b64":null,"value_b64":"@@"}\n'
    )
    (landing / "bad.jsonl").write_bytes(b"".join(text))
    set_mtime(landing / "bad.jsonl", 1_001)
    run("first")

    # 2
    altered = dataclasses.replace(p0[12], value=b"not the same bytes")
    reexport = [r for r in p0 if r.offset >= 10 and r.offset != 12] + [altered, p0[6], p0[6]]
    reexport += [*p1[half:], dataclasses.replace(p1[half], key=b"other key")]
    exports.write_export(landing / "reexport.kcat.jsonl", reexport, "kcat")
    set_mtime(landing / "reexport.kcat.jsonl", 2_000)
    steps["altered"] = altered
    run("reexport")

    # 3
    exports.write_export(
        landing / "first.parquet", [r for r in p0 if r.offset != 6] + p1[:half], "parquet"
    )
    set_mtime(landing / "first.parquet", 3_000)
    run("changed")

    # 4: killed between the bronze commit and the later ones.
    exports.write_export(landing / "late.parquet", p2[-3:], "parquet")
    set_mtime(landing / "late.parquet", 4_000)
    original = BatchCommits.offset_runs

    def killed(self, *args):
        raise SimulatedKill("after the bronze commit")

    BatchCommits.offset_runs = killed
    try:
        with pytest.raises(SimulatedKill):
            land(spark, config)
    finally:
        BatchCommits.offset_runs = original
    steps["killed"] = {
        "bronze": bronze_records(tables),
        "versions": versions(tables),
        "plan": tables.plan.exists(),
        "batches": {row["batch_id"] for row in table(tables.bronze)},
    }
    exports.write_export(landing / "later.jsonl", [p2[0]], "jsonl")  # a duplicate, arrived late
    set_mtime(landing / "later.jsonl", 5_000)
    run("recovered")
    run("after")
    run("noop")
    return {"steps": steps, "tables": tables, "p0": p0, "p1": p1, "p2": p2}


@pytest.mark.spark
@pytest.mark.slow
def test_malformed_lines_are_recorded_and_the_rest_lands(story):
    result = story["steps"]["first"]["result"]
    p0, p1, p2 = story["p0"], story["p1"], story["p2"]
    landed_p2 = len(p2) - 3
    assert result.errors == 2
    assert result.records_read == result.records_added == (len(p0) - 3) + len(p1) // 2 + landed_p2
    bronze = story["steps"]["first"]["bronze"]
    assert {k: v for k, v in bronze.items() if k[1] == 2} == expected(p2[:-3])
    errors = sorted(table(story["tables"].export_errors), key=lambda row: row["line"])
    assert [(Path(e["source_file"]).name, e["line"], e["batch_id"]) for e in errors] == [
        ("bad.jsonl", 3, 1),
        ("bad.jsonl", 6, 1),
    ]
    assert "not valid JSON" in errors[0]["reason"]
    assert errors[0]["raw"].startswith(b'{"topic": "orders"')
    assert "base64" in errors[1]["reason"] and "value_b64" in errors[1]["reason"]
    # Coordinates a bad line still had are kept.
    assert (errors[1]["topic"], errors[1]["partition"], errors[1]["offset"]) == ("orders", 2, 98)
    files = {Path(r["path"]).name: r for r in table(story["tables"].landed_files)}
    assert (files["bad.jsonl"]["errors"], files["bad.jsonl"]["records_added"]) == (2, landed_p2)


@pytest.mark.spark
@pytest.mark.slow
def test_offset_gaps_are_recorded(story):
    first = story["steps"]["first"]["result"]
    assert (first.offset_gaps, first.missing_offsets) == (1, 3)
    # After the re-export filled offset 6, two one-offset gaps remain; the rewrite closes them.
    reexport = story["steps"]["reexport"]["result"]
    assert (reexport.offset_gaps, reexport.missing_offsets) == (2, 2)
    changed = story["steps"]["changed"]["result"]
    assert (changed.offset_gaps, changed.missing_offsets) == (0, 0)
    assert table(story["tables"].offset_gaps) == []
    ranges = table(story["tables"].offset_ranges)
    counts = {p: len(story[f"p{p}"]) for p in (0, 1, 2)}
    assert sorted((r["partition"], r["from_offset"], r["to_offset"]) for r in ranges) == [
        (p, 0, counts[p] - 1) for p in (0, 1, 2)
    ]


@pytest.mark.spark
@pytest.mark.slow
def test_gap_rows_name_partition_range_and_first_batch(story):
    def gaps(step):
        return sorted(
            (g["topic"], g["partition"], g["from_offset"], g["to_offset"], g["size"], g["batch_id"])
            for g in story["steps"][step]["gaps"]
        )

    assert gaps("first") == [(TOPIC, 0, 5, 7, 3, 1)]
    assert gaps("reexport") == [(TOPIC, 0, 5, 5, 1, 2), (TOPIC, 0, 7, 7, 1, 2)]
    assert gaps("changed") == []


@pytest.mark.spark
@pytest.mark.slow
def test_reexport_adds_only_new_offsets_and_records_conflicts(story):
    step = story["steps"]["reexport"]
    result = step["result"]
    p0, p1 = story["p0"], story["p1"]
    half = len(p1) // 2
    overlap = len([r for r in p0 if r.offset >= 10])  # already landed from first.parquet
    assert result.batch_id == 2
    assert result.files_landed == 1 and result.files_skipped == 2
    assert result.records_read == overlap + 2 + (len(p1) - half) + 1
    assert result.records_added == 1 + (len(p1) - half)  # offset 6 and p1's second half
    # Offsets already in bronze with the same bytes, plus the second copy of offset 6.
    assert result.duplicates == (overlap - 1) + 1
    assert result.conflicts == 2  # offset 12 against bronze; p1[half] against its first copy
    before, after = story["steps"]["first"]["bronze"], step["bronze"]
    assert len(after) == len(before) + result.records_added
    assert {k: v for k, v in after.items() if k in before} == before  # the first copy stays
    assert after[(TOPIC, 0, 12)] == expected([p0[12]])[(TOPIC, 0, 12)]

    conflicts = sorted(table(story["tables"].offset_conflicts), key=lambda r: r["partition"])
    assert [(c["partition"], c["offset"], c["batch_id"]) for c in conflicts] == [
        (0, 12, 2),
        (1, p1[half].offset, 2),
    ]
    against_bronze, in_batch = conflicts
    assert against_bronze["value"] == b"not the same bytes"  # the other copy, kept whole
    assert Path(against_bronze["kept_source_file"]).name == "first.parquet"
    assert against_bronze["kept_batch_id"] == 1
    assert in_batch["key"] == b"other key"
    assert Path(in_batch["kept_source_file"]).name == "reexport.kcat.jsonl"
    assert in_batch["kept_batch_id"] == 2
    for conflict in conflicts:
        assert conflict["record_hash"] != conflict["kept_record_hash"]


@pytest.mark.spark
@pytest.mark.slow
def test_changed_file_is_read_again_and_dedup_keeps_bronze_right(story):
    step = story["steps"]["changed"]
    result = step["result"]
    p0, p1 = story["p0"], story["p1"]
    assert result.batch_id == 3
    assert result.files_landed == 1  # only first.parquet changed
    assert result.records_read == len(p0) - 1 + len(p1) // 2
    assert result.records_added == 2  # offsets 5 and 7
    assert result.duplicates == result.records_read - 2
    bronze = step["bronze"]
    assert {k: v for k, v in bronze.items() if k[1] == 0} == expected(p0)
    files = [r for r in table(story["tables"].landed_files) if r["path"].endswith("first.parquet")]
    assert sorted(r["batch_id"] for r in files) == [1, 3]


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_killed_between_commits_is_finished_by_the_next(story):
    steps = story["steps"]
    killed, recovered = steps["killed"], steps["recovered"]
    # The kill left bronze committed (batch 4), landed_files not, and the plan behind.
    assert killed["plan"]
    assert 4 in killed["batches"]
    assert killed["versions"]["landed_files"] == steps["changed"]["versions"]["landed_files"]
    result = recovered["result"]
    assert result.recovered and result.batch_id == 4
    assert result.files_landed == 1 and result.files_waiting == 1  # later.jsonl waits
    assert result.records_added == 3 and result.duplicates == 0
    # Nothing landed twice, bronze got no new version from the retry, everything is there.
    assert recovered["bronze"] == killed["bronze"]
    assert recovered["versions"]["records"] == killed["versions"]["records"]
    assert recovered["versions"]["landed_files"] == killed["versions"]["landed_files"] + 1
    everything = expected(story["p0"] + story["p1"] + story["p2"])
    assert recovered["bronze"] == everything
    landed = {
        Path(r["path"]).name: r["batch_id"]
        for r in table(story["tables"].landed_files)
        if r["batch_id"] == 4
    }
    assert landed == {"late.parquet": 4}
    assert not story["tables"].plan.exists()


@pytest.mark.spark
@pytest.mark.slow
def test_a_file_arriving_after_a_kill_lands_in_the_next_batch(story):
    after = story["steps"]["after"]["result"]
    assert (after.batch_id, after.recovered, after.files_landed) == (5, False, 1)
    assert (after.records_read, after.records_added, after.duplicates) == (1, 0, 1)
    noop = story["steps"]["noop"]
    assert noop["result"].batch_id is None
    assert noop["versions"] == story["steps"]["after"]["versions"]


@pytest.mark.spark
@pytest.mark.slow
def test_a_lost_plan_never_lands_records_twice(spark, generated, tmp_path, monkeypatch):
    """Killed after the bronze commit, and the plan deleted by hand: the next batch takes a
    new id, reads the file again, and finds its records in bronze (ranges rebuilt from it)."""
    config = load_config(write_config(tmp_path, [TOPIC]))
    tables = LandTables.of(LakeLayout(config.lake))
    records = retopic(generated[0], TOPIC)
    exports.write_export(tmp_path / "landing" / "a.jsonl", records, "jsonl")

    def killed(self, *args):
        raise SimulatedKill("after the bronze commit")

    with monkeypatch.context() as patch:
        patch.setattr(BatchCommits, "offset_runs", killed)
        with pytest.raises(SimulatedKill):
            land(spark, config)
    tables.plan.unlink()
    result = land(spark, config)
    assert (result.batch_id, result.recovered) == (2, False)
    assert (result.records_added, result.duplicates, result.offset_gaps) == (0, len(records), 0)
    assert bronze_records(tables) == expected(records)
    assert [(r["from_offset"], r["to_offset"]) for r in table(tables.offset_ranges)] == [
        (0, len(records) - 1)
    ]


@pytest.mark.spark
def test_land_never_opens_what_lies_outside_its_folder_or_is_not_a_file(spark, generated, tmp_path):
    """A FIFO (opening it would block for ever), a socket and links out of the landing area
    are refused unopened and reported in the result; the real export lands."""
    config = load_config(write_config(tmp_path, [TOPIC]))
    landing = tmp_path / "landing"
    records = retopic(generated[1], TOPIC)
    exports.write_export(landing / "a.jsonl", records, "jsonl")
    exports.write_export(tmp_path / "elsewhere.jsonl", retopic(generated[2], TOPIC), "jsonl")
    (landing / "out.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    os.mkfifo(landing / "fifo.jsonl")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(landing / "socket.jsonl"))
        result = land(spark, config)
    assert (result.files_landed, result.records_added, result.errors) == (1, len(records), 0)
    assert result.files_refused == 3
    assert [line.split(": ")[0] for line in result.refused] == [
        f"{landing}/{name}" for name in ("fifo.jsonl", "out.jsonl", "socket.jsonl")
    ]
    assert "outside" in result.refused[1] and "3 refused" in str(result)


@pytest.mark.spark
@pytest.mark.slow
def test_each_commit_records_its_batch_and_unchanged_tables_get_none(story):
    tables = story["tables"]
    assert sorted({r["batch_id"] for r in table(tables.landed_files)}) == [1, 2, 3, 4, 5]
    last_batch = {path.name: DeltaTable(str(path)).transaction_version("land")
                  for path in tables.committed()}  # fmt: skip
    # Gaps last changed in batch 3 (closed), ranges in 4; batch 5 added no record.
    assert last_batch == {
        "records": 4,
        "export_errors": 1,
        "offset_conflicts": 2,
        "offset_ranges": 4,
        "offset_gaps": 3,
        "landed_files": 5,
    }


# --- pieces without Spark -----------------------------------------------------------------------


def test_merge_runs_joins_adjacent_and_overlapping_runs():
    old = {("t", 0): [(0, 4), (10, 12)], ("t", 1): [(5, 5)]}
    new = {("t", 0): [(5, 6), (8, 9), (11, 20)], ("u", 0): [(0, 0)]}
    assert merge_runs(old, new) == {
        ("t", 0): [(0, 6), (8, 20)],
        ("t", 1): [(5, 5)],
        ("u", 0): [(0, 0)],
    }
    assert merge_runs(old, {}) == old


def test_overlap_windows_cover_only_where_the_batch_meets_bronze():
    ranges = {("t", 0): [(0, 9), (20, 29)], ("t", 1): [(0, 9)]}
    extents = {("t", 0): (5, 25), ("t", 1): (10, 19), ("t", 2): (0, 5)}
    # (t, 1) starts after bronze ends and (t, 2) is new: no bronze lookups for them.
    assert overlap_windows(extents, ranges) == {("t", 0): (5, 25)}
    assert overlap_windows({("t", 0): (12, 15)}, ranges) == {}


def test_discover_files_expands_directories_and_skips_bookkeeping(tmp_path):
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".a.jsonl.crc").write_text("")
    spark_dir = tmp_path / "spark-export"
    (spark_dir / "_temporary").mkdir(parents=True)
    (spark_dir / "part-0.parquet").write_text("")
    (spark_dir / "_temporary" / "part-1.parquet").write_text("")
    assert [
        Path(p).relative_to(tmp_path).as_posix() for p in discover_files([f"{tmp_path}/*"]).files
    ] == [
        "a.jsonl",
        "spark-export/part-0.parquet",
    ]
    assert discover_files([f"{tmp_path}/none/*"]).files == []
    # The lake under a landing glob is not landed.
    bronze = LakeLayout(tmp_path / "lake").bronze
    bronze.mkdir(parents=True)
    (bronze / "part-0.parquet").write_text("")
    assert len(discover_files([f"{tmp_path}/**"], exclude=[tmp_path / "lake"]).files) == 2
    # A file named outright is taken, whatever its name; patterns add up.
    named = discover_files([str(tmp_path / "_SUCCESS"), f"{tmp_path}/*.jsonl"]).files
    assert [Path(p).name for p in named] == ["_SUCCESS", "a.jsonl"]


@pytest.mark.parametrize("pattern", ["/", "/*", "//", "/**/*.jsonl", "", " "])
def test_a_pattern_searching_from_the_filesystem_root_is_refused(pattern):
    """`inputs: "exports/*.jsonl"` once became one pattern per character: "/" walked the
    whole filesystem, /dev included, opening every file to sniff it."""
    with pytest.raises(ConfigError, match=r"whole filesystem from /|empty pattern"):
        discover_files([pattern])
    with pytest.raises(ConfigError, match="whole filesystem from /"):
        discover_files(["/tmp/../*"])


def test_a_string_is_one_pattern(tmp_path, monkeypatch):
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "a.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    found = discover_files("exports/*.jsonl").files
    assert [Path(p).name for p in found] == ["a.jsonl"]


def test_matches_never_leave_the_pattern_folder(tmp_path):
    landing, outside = tmp_path / "landing", tmp_path / "outside"
    landing.mkdir()
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.jsonl").write_text("{}")
    (outside / "dir" / "part-0.jsonl").write_text("{}")
    (landing / "a.jsonl").write_text("")
    (landing / "link-out.jsonl").symlink_to(outside / "secret.jsonl")
    (landing / "dir-out").symlink_to(outside / "dir")
    (landing / "link-in.jsonl").symlink_to(landing / "a.jsonl")
    (landing / "broken.jsonl").symlink_to(landing / "gone.jsonl")
    found = discover_files([f"{landing}/*"])
    assert found.files == [str(landing / "a.jsonl")]  # the link inside is the same file
    refused = {Path(r.path).name: r.reason for r in found.refused}
    assert set(refused) == {"link-out.jsonl", "dir-out", "broken.jsonl"}
    assert "outside" in refused["link-out.jsonl"] and "outside" in refused["dir-out"]
    assert "No such file" in refused["broken.jsonl"]
    # Named outright, a link out is refused as well.
    assert discover_files([str(landing / "link-out.jsonl")]).files == []


def test_special_files_are_refused_without_being_opened(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.jsonl").write_text("")
    os.mkfifo(landing / "fifo.jsonl")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(landing / "socket.jsonl"))
        found = discover_files([f"{landing}/*"])
    assert [Path(p).name for p in found.files] == ["a.jsonl"]
    assert [str(r) for r in found.refused] == [
        f"{landing}/fifo.jsonl: is a FIFO, not a regular file; not opened",
        f"{landing}/socket.jsonl: is a socket, not a regular file; not opened",
    ]
    # Named outright, /dev/zero is refused too (its folder is /dev).
    assert "a device" in discover_files(["/dev/zero"]).refused[0].reason


def test_listing_descends_only_with_double_star_and_never_through_links(tmp_path):
    landing = tmp_path / "landing"
    (landing / "day" / "hour").mkdir(parents=True)
    (landing / "top.jsonl").write_text("")
    (landing / "day" / "a.jsonl").write_text("")
    (landing / "day" / "hour" / "b.jsonl").write_text("")
    (landing / "day" / "loop").symlink_to(landing)  # ** must not go round it
    (landing / "day" / "loop2").symlink_to(landing / "day")

    def names(pattern):
        return [Path(p).relative_to(landing).as_posix() for p in discover_files([pattern]).files]

    assert names(f"{landing}/*") == ["day/a.jsonl", "top.jsonl"]  # a matched dir: one level
    assert names(f"{landing}/*/*.jsonl") == ["day/a.jsonl"]
    assert names(f"{landing}/**/*.jsonl") == ["day/a.jsonl", "day/hour/b.jsonl", "top.jsonl"]
    found = discover_files([f"{landing}/*"])
    assert (
        "not searched (use ** to)"
        in {r.reason for r in found.refused if r.path.endswith("hour")}.pop()
    )


@pytest.mark.spark
def test_reading_no_files_gives_no_rows(spark):
    rows = export_source.read_export_files(spark, [])
    assert rows.columns == [*export_source.EXPORT_ROWS_SCHEMA.names, "source_file"]
    assert rows.count() == 0


def read_rows(files: list[export_source.ExportFile], limits: Limits | None = None) -> pa.Table:
    partitions = export_source.plan_partitions(files)
    batches = [
        batch
        for partition in partitions
        for batch in export_source.read_partition(partition, limits)
    ]
    return pa.Table.from_batches(batches, schema=export_source.ARROW_SCHEMA)


def test_parquet_is_split_by_row_groups_and_keeps_positions(generated, tmp_path, monkeypatch):
    records = retopic(generated[0] + generated[1], TOPIC)
    path = tmp_path / "many-groups.parquet"
    exports.write_export(path, records, "parquet")
    data = pq.read_table(path)
    pq.write_table(data, path, row_group_size=10)
    monkeypatch.setattr(export_source, "SPLIT_BYTES", 1)  # one partition per row group
    file = export_source.describe_file(str(path))
    partitions = export_source.plan_partitions([file])
    assert len(partitions) == -(-len(records) // 10)
    rows = read_rows([file])
    assert rows.column("position").to_pylist() == list(range(len(records)))
    assert rows.column("offset").to_pylist() == [r.offset for r in records]
    assert rows.column("value").to_pylist() == [r.value for r in records]
    assert rows.column("error").null_count == len(records)


@pytest.mark.parametrize("split_bytes", [1, 10**9])
def test_a_row_group_past_the_limit_is_an_error_row_in_any_split(
    tmp_path, monkeypatch, split_bytes
):
    path = tmp_path / "large-group.parquet"
    records = parquet_with_a_large_row_group(path, 256 << 10)
    monkeypatch.setattr(export_source, "SPLIT_BYTES", split_bytes)
    file = export_source.describe_file(str(path))
    assert len(export_source.plan_partitions([file])) == (3 if split_bytes == 1 else 1)
    rows = read_rows([file], Limits(max_parquet_row_group_bytes=512 << 10))
    rows = rows.sort_by("position").to_pylist()
    assert [(r["position"], r["offset"]) for r in rows if r["error"] is None] == [
        (r.offset, r.offset) for r in records[:4] + records[8:]
    ]
    (error,) = [r for r in rows if r["error"] is not None]
    assert (error["position"], error["line"]) == (4, 5)
    assert "row group 1 (rows 5-8) uncompressed" in error["error"]


def test_land_reads_values_a_parquet_dictionary_repeats_a_budget_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "repeated.parquet"
    large = bytes(range(256)) * 400
    records = [
        KafkaRecord(TOPIC, 0, offset, b"k", large, 1_700_000_000_000, (("h", large),), 0)
        for offset in range(60)
    ]
    pq.write_table(
        pa.Table.from_batches([exports.records_to_arrow(records)]),
        path,
        dictionary_pagesize_limit=1 << 20,
    )
    assert path.stat().st_size < 64 << 10  # 12 MB once its values are expanded
    monkeypatch.setattr(exports, "EXPANDED_BATCH_BYTES", 1 << 20)
    file = export_source.describe_file(str(path))
    partition = export_source.plan_partitions([file])[0]
    batches = list(export_source.read_partition(partition))
    assert len(batches) == 12  # 5 records of 204,800 bytes per MiB
    assert all(batch.nbytes < 1 << 21 for batch in batches)
    rows = pa.Table.from_batches(batches, schema=export_source.ARROW_SCHEMA)
    assert rows.column("position").to_pylist() == list(range(60))
    assert rows.column("value").to_pylist() == [large] * 60
    assert rows.column("headers").to_pylist() == [[{"key": "h", "value": large}]] * 60


@pytest.mark.parametrize("split_bytes", [1, 700, 5_000, 10**9])
def test_json_lines_are_split_at_line_ends_and_keep_line_numbers(
    generated, tmp_path, monkeypatch, split_bytes
):
    records = retopic(generated[0] + generated[1], TOPIC)
    path = tmp_path / "big.kcat.jsonl"
    exports.write_export(path, records, "kcat")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3:3] = [b"\n", b"not json\n"]  # a blank line, then a bad one: line 5
    # Line 9 is longer than the limit: it is read through, not kept, and reported.
    limit = max(map(len, lines)) + 100
    lines.insert(8, b'{"topic":"t","partition":0,"offset":99,"payload":"' + b"A" * limit + b'"}\n')
    lines.append(b'{"topic": "orders", "partition": 0, "payload": "x"}')  # no offset, no "\\n"
    path.write_bytes(b"".join(lines))
    monkeypatch.setattr(export_source, "SPLIT_BYTES", split_bytes)
    file = export_source.describe_file(str(path))
    partitions = export_source.plan_partitions([file])
    if split_bytes == 10**9:
        assert [p.byte_range for p in partitions] == [None]  # small files are read whole
    else:
        assert len(partitions) > 1
        ends = [p.byte_range[1] for p in partitions]
        assert ends[-1] is None and all(
            path.read_bytes()[end - 1 : end] == b"\n" for end in ends[:-1]
        )
    rows = read_rows([file], Limits(max_export_line_bytes=limit)).sort_by("position").to_pylist()
    got = [r for r in rows if r["error"] is None]
    assert [(r["partition"], r["offset"], r["value"]) for r in got] == [
        (r.partition, r.offset, r.value) for r in records
    ]
    errors = [r for r in rows if r["error"] is not None]
    assert [e["line"] for e in errors] == [5, 9, len(lines)]
    assert "not valid JSON" in errors[0]["error"] and errors[0]["raw"] == b"not json\n"
    too_long = f"line 9 ({len(lines[8]):,} bytes) exceeds limits.max-export-line-bytes = {limit:,}"
    assert too_long in errors[1]["error"]
    assert errors[1]["raw"] == lines[8][: exports.LONG_LINE_HEAD]
    assert "`offset` must be an integer" in errors[2]["error"]
    assert len({r["position"] for r in rows}) == len(rows)  # positions order the file


def test_parquet_rows_without_coordinates_become_error_rows(tmp_path):
    table_ = pa.table(
        {
            "key": pa.array([b"k0", b"k1", b"k2", b"k3"]),
            "value": pa.array([b"v0", None, b"v2", b"v3"]),
            "topic": pa.array(["t", "t", None, "t"]),
            "partition": pa.array([0, -1, 0, 1], pa.int32()),
            "offset": pa.array([0, 1, 2, None], pa.int64()),
        }
    )
    path = tmp_path / "odd.parquet"
    pq.write_table(table_, path)
    rows = read_rows([export_source.describe_file(str(path))]).to_pylist()
    records = [r for r in rows if r["error"] is None]
    errors = sorted((r for r in rows if r["error"] is not None), key=lambda r: r["line"])
    assert [(r["offset"], r["key"], r["headers"], r["timestamp"]) for r in records] == [
        (0, b"k0", None, None)
    ]
    assert [e["line"] for e in errors] == [2, 3, 4]
    assert "partition" in errors[0]["error"] and "-1" in errors[0]["error"]
    assert errors[0]["offset"] == 1  # what could be read is kept
    assert all(e["file_index"] == 0 for e in errors)


def test_parquet_columns_of_other_types_are_reported_not_dropped(tmp_path):
    path = tmp_path / "typed.parquet"
    pq.write_table(
        pa.table(
            {
                "key": pa.array([b"k"]),
                "value": pa.array([b"v"]),
                "topic": pa.array(["t"]),
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([7], pa.int64()),
                "headers": pa.array([[1, 2]], pa.list_(pa.int64())),
            }
        ),
        path,
    )
    rows = read_rows([export_source.describe_file(str(path))]).to_pylist()
    assert len(rows) == 1 and rows[0]["offset"] is None
    assert rows[0]["error"].startswith("rows 1-1: columns not of the Spark Kafka export types")


def test_not_an_export_is_one_error_for_the_file(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": [1, 2]}), path)
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(b"\x1f\x8b\x08\x00garbage")
    files = [export_source.describe_file(str(p)) for p in (path, garbage)]
    rows = read_rows(files).to_pylist()
    assert [(r["file_index"], r["line"]) for r in rows] == [(0, None), (1, None)]
    assert "missing column(s) key, value, topic, partition, offset" in rows[0]["error"]
    assert rows[1]["error"]  # exports' reason for the unreadable gzip stream


def test_json_lines_errors_keep_their_place_among_records(generated, tmp_path):
    records = retopic(generated[0][:4], TOPIC)
    path = tmp_path / "mixed.jsonl"
    exports.write_export(path, records, "jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(1, b"[1, 2]\n")
    path.write_bytes(b"".join(lines))
    rows = read_rows([export_source.describe_file(str(path))]).sort_by("position").to_pylist()
    assert [(r["position"], r["offset"], r["line"]) for r in rows] == [
        (0, records[0].offset, None),
        (1, None, 2),
        (2, records[1].offset, None),
        (3, records[2].offset, None),
        (4, records[3].offset, None),
    ]
    assert "expected a JSON object" in rows[1]["error"]
    assert rows[1]["raw"] == b"[1, 2]\n"


@pytest.mark.spark
def test_a_stale_or_inconsistent_plan(tmp_path, spark):
    config = load_config(write_config(tmp_path, [TOPIC]))
    tables = LandTables.of(LakeLayout(config.lake))
    tables.plan.parent.mkdir(parents=True)
    tables.plan.write_text("{not json")
    with pytest.raises(LandError, match="unreadable land plan"):
        land(spark, config)
    tables.plan.write_text('{"batch_id": 3, "landed_at_us": 0, "files": [], "versions": {}}')
    with pytest.raises(LandError, match=r"plans batch 3 but .* ends at batch 0"):
        land(spark, config)


def test_land_tables_come_from_the_layout(tmp_path):
    layout = LakeLayout(tmp_path / "lake")
    tables = LandTables.of(layout)
    assert tables.committed() == [
        layout.bronze,
        layout.export_errors,
        layout.offset_conflicts,
        layout.offset_ranges,
        layout.offset_gaps,
        layout.landed_files,
    ]
    assert tables.plan == layout.land_plan
    # Every land table sits in bronze/, each in its own directory.
    paths = [*tables.committed(), tables.plan]
    assert {p.parent for p in paths} == {tmp_path / "lake" / "bronze"}
    assert len({p.name for p in paths}) == len(paths)


def cut_off_export(root: Path, topic: str, layout: str, compression: str) -> list[KafkaRecord]:
    """An export of `topic` cut off two thirds in; returns all the records it was written with
    (varied bytes: enough zstd blocks that whole ones precede the break)."""
    records = [
        KafkaRecord(topic, 0, offset, None, os.urandom(150), 1, (), 0) for offset in range(3000)
    ]
    path = root / "landing" / exports.export_file_name(topic, layout, compression)
    exports.write_export(path, records, layout, file_compression=compression)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) * 2 // 3])
    return records


@pytest.mark.parametrize(("layout", "compression"), [("jsonl", "gz"), ("kcat", "zstd")])
def test_a_cut_off_compressed_export_gives_its_records_then_where_it_broke(
    tmp_path, layout, compression
):
    (tmp_path / "landing").mkdir()
    records = cut_off_export(tmp_path, TOPIC, layout, compression)
    file = export_source.describe_file(str(next((tmp_path / "landing").iterdir())))
    rows = read_rows([file]).sort_by("position").to_pylist()
    *got, error = rows
    assert 0 < len(got) < len(records)
    assert [(r["offset"], r["value"], r["error"]) for r in got] == [
        (r.offset, r.value, None) for r in records[: len(got)]
    ]
    assert (error["position"], error["line"]) == (len(got), len(got) + 1)
    name = "gzip" if compression == "gz" else "zstd"
    assert error["error"].startswith(f"jsonl file truncated: {name} stream cut off after line")


@pytest.mark.spark
def test_cut_off_compressed_exports_land_what_was_read_once(spark, tmp_path):
    cut = {"cut-gz": ("jsonl", "gz"), "cut-zstd": ("kcat", "zstd")}
    config = load_config(write_config(tmp_path, cut))
    sources = {topic: cut_off_export(tmp_path, topic, *kind) for topic, kind in cut.items()}
    tables = LandTables.of(LakeLayout(config.lake))
    result = land(spark, config)
    landed = bronze_records(tables)  # asserts no coordinate landed twice
    errors = {Path(e["source_file"]).name: e for e in table(tables.export_errors)}
    files = {Path(r["path"]).name: r for r in table(tables.landed_files)}
    for topic, (layout, compression) in cut.items():
        mine = {k: v for k, v in landed.items() if k[0] == topic}
        assert 0 < len(mine) < len(sources[topic])
        assert mine == expected(sources[topic][: len(mine)]), topic
        name = exports.export_file_name(topic, layout, compression)
        assert errors[name]["line"] == len(mine) + 1
        assert f"stream cut off after line {len(mine)} (" in errors[name]["reason"]
        assert (files[name]["records_read"], files[name]["errors"]) == (len(mine), 1)
    assert result.records_added == len(landed) and result.errors == 2
    assert land(spark, config).records_added == 0
