"""What the CLI prints (ticdc_lake.app.terminal): control characters shown as escapes, credentials
masked, ordinary text as it is, and every command's output through it."""

from __future__ import annotations

import io
import json
import sys

import orjson
import pytest
from ticdc_lake.app.cli import main
from ticdc_lake.app.terminal import printable, printable_json_bytes, printing
from ticdc_lake.bronze.exports import write_export
from ticdc_lake.config import load_config
from ticdc_lake.gold.state import TableState, write_state
from ticdc_lake.lake.layout import LakeLayout

from tests.app.test_cli import open_protocol_record

# A table name that, printed raw, clears the screen, homes the cursor, sets the window title,
# says "Every check passed", returns to the line's start and shows the rest reversed.
HOSTILE = "orders\x1b[2J\x1b[H\x1b]0;pwned\x07Every check passed\r\u202etxt.exe"
RAW = set("\x1b\x07\r\u202e")


@pytest.mark.parametrize(
    "char, shown",
    [
        ("\x1b", "\\x1b"),
        ("\r", "\\x0d"),
        ("\x08", "\\x08"),
        ("\x00", "\\x00"),
        ("\x7f", "\\x7f"),
        ("\x9b", "\\x9b"),  # C1's CSI: ESC [ in one character
        ("\u202e", "\\u202e"),
        ("\u2066", "\\u2066"),
        ("\u2028", "\\u2028"),
    ],
)
def test_control_characters_are_shown_as_escapes(char, shown):
    assert printable(f"a{char}b") == f"a{shown}b"


def test_layout_and_ordinary_text_print_as_they_are():
    text = "gold shop.café\t1,000 rows\n  中文 表 🎉 naïve Ω"
    assert printable(text) == text


def test_credentials_are_masked_on_the_way_out():
    shown = printable("registry http://lake:p@ss w0rd@host:8081 said Authorization: Basic dTpw")
    assert shown == "registry http://lake:***@host:8081 said Authorization: Basic ***"


def test_json_bytes_keep_their_value_with_the_same_characters_escaped():
    value = {"table": "t\u202egnp.exe", "v": "a\x9b2J\x7f\u2028é中"}
    data = orjson.dumps(value)  # C0 is escaped by JSON already; these are not
    printed = printable_json_bytes(data)
    assert not any(c in printed.decode() for c in "\u202e\x9b\x7f\u2028")
    assert orjson.loads(printed) == value
    assert printable_json_bytes(b'{"a":"plain"}') == b'{"a":"plain"}'


def test_printing_escapes_what_is_written_a_line_at_a_time(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with printing():
        sys.stdout.write("http://u:pa")  # a credential and an escape split across writes
        sys.stdout.write("ss@host \x1b")
        sys.stdout.write("[2J\n")
        print("partial \x07", end="", file=sys.stderr)
    assert out.getvalue() == "http://u:***@host \\x1b[2J\n"
    assert err.getvalue() == "partial \\x07"  # flushed at the block's end
    assert sys.stdout is out and sys.stderr is err


def write_hostile_gold_state(tmp_path):
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    config = load_config(config_path)
    state = TableState("t", "shop", HOSTILE, "p", "watermark", 7, 7, 1, rows=3)
    write_state(LakeLayout(config.lake).gold_state, "t", [state], version=1, generation=0)
    return config_path


def test_dq_report_shows_a_hostile_table_name_escaped(tmp_path, capsys):
    """The name cleared the screen and printed a fake "Every check passed"."""
    config_path = write_hostile_gold_state(tmp_path)
    assert main(["dq-report", "--config", str(config_path)]) == 0
    out = capsys.readouterr().out
    assert not RAW & set(out), out
    (line,) = [line for line in out.splitlines() if line.startswith("  gold shop.")]
    assert "orders\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07Every check passed\\x0d\\u202etxt.exe" in line
    assert ": 3 rows" in line
    assert main(["dq-report", "--config", str(config_path), "--json"]) == 0
    (gold,) = json.loads(capsys.readouterr().out)["gold"]
    assert HOSTILE in gold["table"]  # JSON keeps the name, escaped by JSON itself


def test_errors_quoting_what_was_given_show_it_escaped(tmp_path, capsys):
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    assert main(["run", "--config", str(config_path), "--stages", "\x1b[2Jland\x08"]) == 2
    err = capsys.readouterr().err
    assert "unknown stage(s) \\x1b[2Jland\\x08" in err
    assert not (RAW | {"\x08"}) & set(err)


def test_decode_prints_names_and_values_with_those_characters_json_escaped(tmp_path, capsysbinary):
    record = open_protocol_record(1, c_varchar="a\x9b2J\x7f\u2028é")
    path = tmp_path / "records.jsonl"
    write_export(path, [record], "jsonl")
    assert main(["decode", "--protocol", "open-protocol", str(path)]) == 0
    out = capsysbinary.readouterr().out
    assert "\x9b".encode() not in out and "\u2028".encode() not in out and b"\x7f" not in out
    (event,) = [orjson.loads(line) for line in out.splitlines()]
    assert event["columns"]["c_varchar"] == "a\x9b2J\x7f\u2028é"
