"""The docs name only flags that exist: every `--flag` in README.md,
docs/*.md and scripts/README.md is an option of some `refscore` command (as
its `--help` lists it), or a flag of another tool the docs mention: the
argparse options of the repository's own Python entry points (python -m
refscore.ray / refscore.spark, scripts/**/*.py), or one of FOREIGN below.
Also: docs/usage.md's exit-code table is the one `--help` prints.
REFSCORE_BIN names the binary."""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
DOCS = [ROOT / "README.md", ROOT / "scripts" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Flags of tools that are neither refscore nor one of the repository's argparse
# scripts, as the docs use them. Keep this list short: a refscore flag must
# never be added here (a misspelt or removed one would then pass).
FOREIGN = {
    "release": "cargo build/run/test/bench --release",
    "bench": "cargo bench --bench NAME",
    "features": "cargo build/check --features cuda",
    "test": "cargo test --test NAME",
    "nocapture": "the test harness: cargo test -- --nocapture",
    "check": "scripts/env/build-cuda.sh --check",
    "parallel": "llama-server --parallel N (the judge server's slots)",
    "no-deps": "pip install --no-deps (scripts/fixtures/make-static-model.sh)",
}

# `--flag` not preceded by a word character or a hyphen (so `a---b` anchors and
# `x--y` are not flags); a trailing `-*` (`--judge-*`) names a family of flags.
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(-\*)?")


def help_text(*args):
    run = subprocess.run([BIN, *args, "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def cli():
    """{command: its long options}, from `refscore --help` and each command's."""
    if not Path(BIN).exists():
        if os.environ.get("REFSCORE_BIN"):
            pytest.fail(f"REFSCORE_BIN={BIN} does not exist")
        pytest.skip(f"no refscore binary at {BIN} (set REFSCORE_BIN)")
    top = help_text()
    commands = re.search(r"^Commands:\n(.*?)\n\n", top, re.S | re.M).group(1)
    names = [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", commands, re.M) if m.group(1) != "help"]
    assert "score" in names and "report" in names, names
    option = re.compile(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", re.M)
    flags = {"": set(option.findall(top))}
    for name in names:
        flags[name] = set(option.findall(help_text(name)))
    assert {"judge-url", "gold", "resume"} <= flags["score"], flags["score"]
    return flags


def argparse_flags():
    """The long options of the repository's Python entry points."""
    found = set()
    files = [*(ROOT / "crates" / "python" / "python").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
    for path in files:
        found |= set(re.findall(r"add_argument\(\s*(?:\"-\w\",\s*)?\"--([a-z][a-z0-9-]*)\"", path.read_text()))
    return found


def named_flags():
    """(file, line number, flag, is a family) for every flag token in the docs."""
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in FLAG.finditer(line):
                yield path.relative_to(ROOT), number, m.group(1), bool(m.group(2))


def test_every_flag_the_docs_name_exists(cli):
    known = set().union(*cli.values())
    others = argparse_flags() | set(FOREIGN)
    missing = []
    for path, number, flag, family in named_flags():
        if family:
            ok = any(k.startswith(flag + "-") for k in known)
        else:
            ok = flag in known or flag in others
        if not ok:
            missing.append(f"{path}:{number}: --{flag}{'-*' if family else ''}")
    assert not missing, "flags no refscore command has (nor FOREIGN):\n" + "\n".join(missing)


def test_foreign_flags_are_not_refscore_flags(cli):
    """A FOREIGN entry that is a refscore flag would hide that flag's removal."""
    known = set().union(*cli.values())
    assert not (set(FOREIGN) & known)


def test_the_docs_cover_the_main_flags(cli):
    """The check above sees flags: make sure it saw the docs' main ones."""
    named = {flag for _, _, flag, _ in named_flags()}
    assert {"judge-url", "judge-band", "gold", "baseline", "resume", "max-error"} <= named


def test_the_exit_code_table_is_the_help_one(cli):
    """docs/usage.md's table lists exactly the codes of `refscore --help`,
    plus 1, which `report --help` gives for a failed regression gate."""
    top = help_text()
    tail = top[top.index("Exit codes:"):]
    codes = {int(c) for c in re.findall(r"^  (\d+)\s", tail, re.M)}
    assert {0, 64, 78} <= codes, tail
    assert re.search(r"^  1\s", help_text("report"), re.M)
    usage = (ROOT / "docs" / "usage.md").read_text()
    table = usage[usage.index("## Exit codes"):]
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == codes | {1}
