"""README.md and docs/ stay true: short, every command they show exists, every link resolves, every table
comes from its results file."""

from __future__ import annotations

import re
from pathlib import Path

from specdemo.cli import build_parser
from specdemo.view import report

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "tools" / "README.md"]
COMMAND = re.compile(r"python -m specdemo ([a-z][\w-]*)((?:[^`\n]|\\\n)*)")


def subcommands() -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


def synopsis() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("<!-- synopsis:start -->")[1].split("<!-- synopsis:end -->")[0]


def test_the_readme_is_short_and_tells_no_machine_history():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for word in ("sitting", "quick hour", "slow hour", "earlier machine", "the issue"):
        assert word not in text.lower(), word
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)  # dates live with their numbers, in docs/


def test_the_synopsis_names_every_command_option_and_choice():
    text = synopsis()
    for name, parser in subcommands().items():
        assert f"python -m specdemo {name}" in text, name
        for action in parser._actions:
            if action.option_strings and "--help" not in action.option_strings:
                assert action.option_strings[-1] in text, (name, action.option_strings)
                for choice in action.choices or ():
                    assert str(choice) in text, (name, action.option_strings, choice)


def test_every_command_shown_in_the_docs_exists_with_its_options():
    commands = subcommands()
    seen = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if page == README:
            text = text.replace(synopsis(), "")
        for name, rest in COMMAND.findall(text):
            assert name in commands, (page.name, name)
            known = {o for a in commands[name]._actions for o in a.option_strings}
            for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", rest.split("#")[0]):
                assert option in known, (page.name, name, option)
            seen += 1
    assert seen > 10  # the control: the pattern finds the commands


def test_every_relative_link_resolves():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            assert (page.parent / target.split("#")[0]).exists(), (page.name, target)


def test_the_result_tables_are_what_the_results_files_say():
    """Nothing hand-edited: the README's block and docs/benchmarks.md are the report's rendering."""
    readme = README.read_text(encoding="utf-8")
    assert report.readme_with_results(readme) == readme
    assert (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8") == report.benchmarks_page()
    for name in report.DOCS_WITH_DECISIONS:  # the measured decisions' tables
        text = (ROOT / name).read_text(encoding="utf-8")
        assert report.doc_with_decisions(name, text) == text and "kept |" in text, name
    for name in report.SOURCES:
        assert (ROOT / name).exists(), name
