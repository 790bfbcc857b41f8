"""The code README.md and docs/ show runs: each Python block runs against a small real lake (the
report tests' one, written by deltalake: no Spark), and each YAML block names only settings the
config file knows; the ones that are whole fragments load as a config."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from ticdc_lake.config import _PipelineFile, load_config

from tests.quality.report_lake import fill_lake, write_config

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python|yaml)\n(.*?)^```", re.S | re.M)
PLACEHOLDER = re.compile(r"<[a-z]+>")  # the configuration reference's <topic>, <name>


def blocks(language: str) -> list:
    """Each fenced block of ``language``, as a test parameter named page#block."""
    return [
        pytest.param(code, id=f"{page.relative_to(REPO)}#{number}")
        for page in PAGES
        for number, (found, code) in enumerate(FENCE.findall(page.read_text()), 1)
        if found == language
    ]


def unknown_settings(model: type[BaseModel], document: dict, where: str = "") -> list[str]:
    """The keys of ``document`` (at any depth) that ``model``'s file format lacks."""
    fields = {info.alias or name: info.annotation for name, info in model.model_fields.items()}
    unknown = []
    for key, value in document.items():
        if key not in fields:
            unknown.append(f"{where}{key}")
            continue
        for section, inner, at in _sections(fields[key], value, f"{where}{key}."):
            unknown += unknown_settings(section, inner, at)
    return unknown


def _sections(annotation, value, at: str) -> list[tuple[type[BaseModel], dict, str]]:
    """The (model, mapping, where) of each section ``value`` holds under a field typed
    ``annotation``, found at ``at``."""
    models = [t for t in _types(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    if isinstance(value, dict) and models:
        return [(models[0], value, at)]
    mapped = [t for t in _types(annotation) if typing.get_origin(t) is dict]
    if isinstance(value, dict) and mapped:
        (inner,) = {typing.get_args(t)[1] for t in mapped}
        return [s for key, item in value.items() for s in _sections(inner, item, f"{at}{key}.")]
    listed = [t for t in _types(annotation) if typing.get_origin(t) is list]
    if isinstance(value, list) and listed:
        (inner,) = {typing.get_args(t)[0] for t in listed}
        return [section for item in value for section in _sections(inner, item, at)]
    return []


def _types(annotation) -> list:
    """``annotation`` with Annotated, unions and Optional taken apart."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _types(arg)]
    return [annotation]


def test_the_docs_have_blocks_this_test_runs():
    assert len(blocks("python")) >= 2 and len(blocks("yaml")) >= 3


@pytest.mark.parametrize("code", blocks("python"))
def test_each_python_block_runs(code, tmp_path, monkeypatch):
    fill_lake(write_config(tmp_path))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("code", blocks("yaml"))
def test_each_yaml_block_names_settings_the_config_knows(code, tmp_path):
    shown = yaml.safe_load(PLACEHOLDER.sub("orders", code))
    assert unknown_settings(_PipelineFile, shown) == []
    if PLACEHOLDER.search(code):
        return  # the reference: every setting at once, some of them exclusive
    config = {"version": 1, "topics": {"orders": {"protocol": "open-protocol", "partitions": 1}}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config | shown))
    load_config(path)


def test_a_misspelt_setting_is_found_at_its_depth():
    shown = {"topics": {"t": {"protocol": "avro", "schema-registy": {}}}, "limts": {}}
    assert unknown_settings(_PipelineFile, shown) == ["topics.t.schema-registy", "limts"]
    shown = {"inputs": ["x/*", {"kafka": {"topic": ["t"]}}], "quality": {"max-lagg": "1h"}}
    assert unknown_settings(_PipelineFile, shown) == ["inputs.kafka.topic", "quality.max-lagg"]
