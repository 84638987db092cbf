"""Every ``layerscope ...`` command the README and docs/*.md show parses with the real parser (issue #30:
"every README/docs command tested or runnable as written"), so a renamed or removed flag, command or
choice fails here instead of in a reader's shell.

Commands are taken from fenced code blocks (parsed as written: a full command line) and from inline
code spans that start with ``layerscope `` (prose naming a command, e.g. "run `layerscope analyze`":
its command, subcommand, flags and choices must exist, its required arguments may be left out).
Only parsing is checked (nothing runs: commands that need a model hub, a GPU or a Ray cluster are
checked the same way); the README's own-data example is run for real by tests/test_readme_example.py.
A synopsis is expanded before parsing: ``[optional]`` groups are parsed left out, each alone and all
together, ``a|b`` alternatives each in turn, and ``...``/``…`` ("more of the same") are dropped.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from pathlib import Path

import pytest

from precompute.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: words that stand for "any command" or "any arguments": such a line is a pattern, not a command
GENERIC = ("COMMAND", "layerscope ...", "layerscope …")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`(layerscope [^`]+)`(?!`)")


def shell_commands(block: str) -> list[str]:
    """The ``layerscope`` commands of a shell block: continuation lines joined, ``# comments`` and
    prompts dropped, ``&&`` / ``;`` chains split."""
    text = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip().removeprefix("$ ")
        for part in re.split(r"\s*(?:&&|;)\s*", line):
            if part.startswith("layerscope ") or part == "layerscope":
                out.append(" ".join(part.split()))
    return out


def doc_commands(path: Path) -> list[tuple[str, bool]]:
    """``(command, whole)``: ``whole`` for a code block's command line, False for an inline span."""
    text = path.read_text()
    found = [(c, True) for block in FENCE.findall(text) for c in shell_commands(block)]
    prose = FENCE.sub("", text)
    # an inline span in a table escapes its pipe (``plan\|run``); a span may wrap onto the next line
    found += [(" ".join(m.replace("\\|", "|").split()), False) for m in SPAN.findall(prose)]
    return [(c, whole) for c, whole in found if not any(g in c for g in GENERIC)]


def _groups(tokens: list[str]):
    """Split ``tokens`` at ``[`` ... ``]`` (possibly nested in one token, e.g. ``[--k 10]``) into
    ``(optional, tokens)`` pieces."""
    pieces, depth, current = [], 0, []
    for tok in tokens:
        opens, closes = tok.count("["), tok.count("]")
        bare = tok.replace("[", "").replace("]", "")
        if depth == 0 and opens:
            if current:
                pieces.append((False, current))
            current = []
        if bare and bare not in ("...", "…"):
            current.append(bare)
        depth += opens - closes
        if depth == 0 and (opens or closes):
            pieces.append((True, current))
            current = []
    if current:
        pieces.append((depth > 0, current))
    return pieces


def _alternatives(args: list[str]) -> list[list[str]]:
    """``args`` with each ``a|b`` token at its first alternative, then each other alternative in turn."""
    first = [t.split("|")[0] if "|" in t and not t.startswith("-") else t for t in args]
    out = [first]
    for i, t in enumerate(args):
        if "|" in t and not t.startswith("-"):
            out += [first[:i] + [alt] + first[i + 1:] for alt in t.split("|")[1:]]
    return out


def variants(command: str) -> list[list[str]]:
    """The argument lists a synopsis stands for (without the leading ``layerscope``): every
    ``[optional]`` group left out, each given alone, all given; each ``a|b`` alternative in turn."""
    tokens = [t for t in shlex.split(command)[1:] if t not in ("...", "…") and not t.endswith(("...", "…"))]
    pieces = _groups(tokens)
    optional = [i for i, (opt, _) in enumerate(pieces) if opt]
    forms = [set()] + [{i} for i in optional] + ([set(optional)] if len(optional) > 1 else [])
    out = []
    for kept in forms:
        args = [t for i, (opt, toks) in enumerate(pieces) if not opt or i in kept for t in toks]
        out += [a for a in _alternatives(args) if a not in out]
    return out


@functools.lru_cache(maxsize=2)
def _parser(whole: bool):
    parser = build_parser()
    if not whole:
        _relax(parser)
    return parser


def _relax(parser) -> None:
    """No argument of ``parser`` or of its subcommands' parsers is required any more."""
    for action in parser._actions:
        action.required = False
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _relax(sub)


def parse(args: list[str], *, whole: bool = True):
    """``build_parser().parse_args(args)`` (``whole`` False: with no required argument); argparse's exit
    (an unknown flag, a bad choice, a missing argument) becomes an AssertionError naming the arguments."""
    try:
        return _parser(whole).parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"layerscope {' '.join(args)!s} does not parse (exit {exc.code})") from None


COMMANDS = [(path.relative_to(ROOT).as_posix(), c, whole) for path in DOCS for c, whole in doc_commands(path)]


def test_the_docs_show_commands():
    files = {f for f, _, whole in COMMANDS if whole}
    assert "README.md" in files and "docs/user-guide.md" in files, files
    assert sum(whole for *_, whole in COMMANDS) >= 12, COMMANDS  # README's own-data block, the user guide's
    assert sum(not whole for *_, whole in COMMANDS) >= 15, COMMANDS  # README's CLI table, prose


@pytest.mark.parametrize("doc, command, whole", COMMANDS,
                         ids=[f"{f}:{'' if w else 'span:'}{c[:60]}" for f, c, w in COMMANDS])
def test_every_documented_command_parses(doc, command, whole):
    for args in variants(command):
        ns = parse(args, whole=whole)
        assert ns.command == args[0], (doc, command)


# ---------------------------------------------------------------- the extraction itself can fail


def test_a_renamed_flag_or_command_fails_and_a_span_may_leave_out_required_arguments():
    with pytest.raises(AssertionError, match="does not parse"):
        parse(["analyze", "--store", "s.duckdb", "--bootstraps", "5"])  # the flag is --bootstrap
    assert parse(["analyze", "--store", "s.duckdb", "--bootstrap", "5"]).command == "analyze"
    with pytest.raises(AssertionError, match="does not parse"):
        parse(["analyze"])  # a code block's command line must be whole: --store is required
    assert parse(["analyze", "--knn", "ann"], whole=False).command == "analyze"
    for wrong in (["analyse"], ["analyze", "--knn", "faiss"], ["runs", "remove"]):
        with pytest.raises(AssertionError, match="does not parse"):
            parse(wrong, whole=False)


def test_shell_blocks_are_split_into_commands():
    block = ("python3 -m venv .venv && . .venv/bin/activate && layerscope demo\n"
             "layerscope precompute --store my.duckdb \\\n    --frames 1,2  # a comment\n"
             "$ layerscope runs --store my.duckdb; echo done\n")
    assert shell_commands(block) == ["layerscope demo", "layerscope precompute --store my.duckdb --frames 1,2",
                                     "layerscope runs --store my.duckdb"]


def test_synopses_expand_to_each_form():
    assert variants("layerscope demo [--small] [--no-dashboard]") == [
        ["demo"], ["demo", "--small"], ["demo", "--no-dashboard"], ["demo", "--small", "--no-dashboard"]]
    assert variants("layerscope sweep plan|run study.toml --store S") == [
        ["sweep", "plan", "study.toml", "--store", "S"], ["sweep", "run", "study.toml", "--store", "S"]]
    assert variants("layerscope analyze --store S [--k 10] [--metric a --metric b ...]")[2] == [
        "analyze", "--store", "S", "--metric", "a", "--metric", "b"]
    assert variants("layerscope merge --store S a.duckdb b.duckdb ...") == [
        ["merge", "--store", "S", "a.duckdb", "b.duckdb"]]
