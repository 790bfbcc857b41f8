"""Exports in a bucket of a real S3 API (tests/s3_server.py), landed into a local lake: the
pipeline gives the generator's gold, a rerun adds no Delta version, a re-uploaded object lands
again as a re-export, patterns keep to their prefix as local globs keep to their folder, and a
store that cannot be listed stops land with one clear message and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.bronze.land import land
from ticdc_lake.bronze.land_inputs import discover_objects
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.storage import StorageError

from tests.app.test_pipeline import delta_versions
from tests.s3_server import ACCESS_KEY, SECRET_KEY


def upload(s3_server, bucket: str, files, prefix: str = "exports") -> list[str]:
    client = s3_server.client()
    keys = []
    for path in files:
        key = f"{prefix}/{Path(path).name}"
        client.put_object(Bucket=bucket, Key=key, Body=Path(path).read_bytes())
        keys.append(key)
    return keys


def bucket_config(generated, s3_server, bucket: str) -> Path:
    """The generator's config, its inputs moved to the bucket."""
    path = generated.config_path
    document = yaml.safe_load(path.read_text())
    document["inputs"] = [f"s3://{bucket}/exports/*"]
    path.write_text(yaml.safe_dump(document) + s3_server.storage_yaml())
    return path


@pytest.fixture(scope="module")
def landed_from_bucket(spark, s3_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("s3-inputs")
    # kcat's JSON Lines: what most exports are (a Parquet export is landed below).
    options = GenerateOptions("canal-json", partitions=2, transactions=40, seed=5, layout="kcat")
    generated = write_generated(out, options)
    bucket = s3_server.bucket()
    upload(s3_server, bucket, generated.export_files)
    config = load_config(bucket_config(generated, s3_server, bucket))
    first = run_stages(spark, config)
    versions = delta_versions(config.lake)
    again = run_stages(spark, config)
    return generated, config, bucket, first, again, versions


def test_exports_in_a_bucket_give_the_generators_gold(landed_from_bucket):
    generated, config, bucket, first, _, _ = landed_from_bucket
    assert config.inputs == (f"s3://{bucket}/exports/*",)
    assert not first.failed
    landed = first.result("land")
    assert landed.errors == 0
    assert landed.records_added == generated.manifest["counts"]["messages"]
    (feed,) = first.result("watermark").changefeeds
    assert feed.watermark == generated.workload.resolved_ts[-1]
    assert ExpectedGold.from_sample(generated.out_dir).compare(config.lake, feed.watermark) == []
    landed = DeltaTable(str(LakeLayout(config.lake).landed_files)).to_pyarrow_table().to_pylist()
    assert {row["path"] for row in landed} == {
        f"s3://{bucket}/exports/{Path(f).name}" for f in generated.export_files
    }
    assert all(row["etag"] for row in landed)


def test_a_rerun_adds_nothing(landed_from_bucket):
    _, config, _, _, again, versions = landed_from_bucket
    assert again.result("land").batch_id is None
    assert delta_versions(config.lake) == versions


def test_a_reuploaded_object_lands_again_as_a_re_export(landed_from_bucket, spark, s3_server):
    generated, config, bucket, *_ = landed_from_bucket
    first = Path(generated.export_files[0])
    body = first.read_bytes()
    s3_server.client().put_object(Bucket=bucket, Key=f"exports/{first.name}", Body=body + b"\n")
    result = land(spark, config)
    assert result.files_landed == 1 and result.records_added == 0
    assert result.duplicates == result.records_read > 0


@pytest.mark.parametrize("file_compression", ["none", "zstd"])
def test_parquet_exports_in_a_bucket_land_whole(spark, s3_server, tmp_path, file_compression):
    options = GenerateOptions(
        "craft", partitions=2, transactions=20, seed=9, file_compression=file_compression
    )
    generated = write_generated(tmp_path, options)
    bucket = s3_server.bucket()
    upload(s3_server, bucket, generated.export_files)
    result = land(spark, load_config(bucket_config(generated, s3_server, bucket)))
    assert result.errors == 0
    assert result.records_added == generated.manifest["counts"]["messages"]


def test_patterns_keep_to_their_prefix_and_say_what_they_refuse(s3_server):
    bucket = s3_server.bucket()
    client = s3_server.client()
    for key in (
        "exports/a.jsonl",
        "exports/_SUCCESS",
        "exports/.a.jsonl.crc",
        "exports/spark.jsonl/part-0.parquet",
        "exports/spark.jsonl/deeper/part-1.parquet",
        "exports-old/b.jsonl",
        "exports/",
        "other/c.jsonl",
    ):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    found = discover_objects([f"s3://{bucket}/exports/*.jsonl"], s3_server.settings())
    assert found.files == [
        f"s3://{bucket}/exports/a.jsonl",
        f"s3://{bucket}/exports/spark.jsonl/part-0.parquet",
    ]
    assert [r.path for r in found.refused] == [
        f"s3://{bucket}/exports/spark.jsonl/deeper/part-1.parquet"
    ]
    deep = discover_objects([f"s3://{bucket}/**/*.parquet"], s3_server.settings())
    assert len(deep.files) == 2 and not deep.refused
    named = discover_objects([f"s3://{bucket}/other/c.jsonl"], s3_server.settings())
    assert named.files == [f"s3://{bucket}/other/c.jsonl"]


@pytest.mark.parametrize("problem", ["no bucket", "no server"])
def test_a_store_that_cannot_be_listed_stops_land_naming_it(
    spark, s3_server, tmp_path, problem, capsys
):
    endpoint = s3_server.endpoint if problem == "no bucket" else "http://127.0.0.1:9"
    storage = s3_server.storage_yaml().replace(s3_server.endpoint, endpoint)
    (tmp_path / "pipeline.yaml").write_text(
        "topics: {t: {protocol: craft, partitions: 1}}\n"
        "inputs: [s3://no-such-bucket/exports/*]\n" + storage
    )
    config = load_config(tmp_path / "pipeline.yaml")
    expected = f"cannot list s3://no-such-bucket/exports.*{endpoint}"
    with pytest.raises(StorageError, match=expected) as error:
        land(spark, config)
    assert ACCESS_KEY not in str(error.value) and SECRET_KEY not in str(error.value)
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").rglob("_delta_log"))
