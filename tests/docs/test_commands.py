"""The commands README.md and docs/ show exist: each `ticdc-lake <subcommand>` in their code
(fenced blocks and `inline` spans) is one the CLI's parser knows, with the --options shown beside
it, and each `make <target>` is a target of the Makefile. Run in-process through ``cli.main``:
no Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ticdc_lake.app.cli import main

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
PAGES = README + "".join(page.read_text() for page in sorted((REPO / "docs").glob("*.md")))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
COMMAND = re.compile(r"(?:^|[\s/(])ticdc-lake\s+([a-z][a-z-]*)([^#]*)", re.M)
MAKE = re.compile(r"^\s*make\s+([a-z][\w-]*\w)(?![\w*-])", re.M)  # not `make bench-*`
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def code_spans(markdown: str) -> list[str]:
    """Each fenced block's lines (shell and YAML comments cut off) and each `inline` span."""
    lines = [line for block in FENCE.findall(markdown) for line in block.splitlines()]
    fenced = [re.sub(r"(^|\s)#.*", "", line) for line in lines]
    inline = re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", FENCE.sub("", markdown))
    return fenced + inline


def shown_commands(markdown: str) -> dict[str, set[str]]:
    """Subcommand -> the --options shown with it."""
    commands: dict[str, set[str]] = {}
    for span in code_spans(markdown):
        for name, rest in COMMAND.findall(span):
            commands.setdefault(name, set()).update(OPTION.findall(rest))
    return commands


def shown_targets(markdown: str) -> set[str]:
    return {target for span in code_spans(markdown) for target in MAKE.findall(span)}


def make_targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([\w-]+)\s*:(?!=)", makefile, re.M))


COMMANDS = shown_commands(PAGES)


def test_the_readme_shows_commands_this_test_finds():
    """A README restructured out of this test's reach would pass it with nothing checked."""
    assert {"run", "query", "backfill", "dq-report"} <= shown_commands(README).keys()
    assert {"demo", "decode", "generate", "airflow"} <= COMMANDS.keys()
    assert {"demo", "test"} <= {
        target for span in code_spans(README) for target in MAKE.findall(span)
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_ticdc_lake_command_in_the_docs_exists_with_its_options(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    printed = capsys.readouterr()
    assert exited.value.code == 0, printed.err
    missing = sorted(option for option in COMMANDS[command] if option not in printed.out)
    assert not missing, f"the docs show `ticdc-lake {command}` with {missing}, which --help lacks"


def test_each_make_target_in_the_docs_is_in_the_makefile():
    targets = make_targets((REPO / "Makefile").read_text())
    assert shown_targets(PAGES) - targets == set()


def test_the_checks_catch_a_command_or_target_that_is_not_there(capsys):
    shown = shown_commands("```\nticdc-lake purge --all  # gone\n```\nthen `make tset`")
    assert shown == {"purge": {"--all"}}
    with pytest.raises(SystemExit) as exited:
        main(["purge", "--help"])
    assert exited.value.code == 2 and "invalid choice: 'purge'" in capsys.readouterr().err
    assert "tset" not in make_targets((REPO / "Makefile").read_text())
    assert shown_targets("`make tset`") == {"tset"}
