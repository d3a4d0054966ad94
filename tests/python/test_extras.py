"""The package's optional extras: `pip install "refscore[spark]"` and
`"refscore[ray]"` bring what refscore.spark and refscore.ray need on the
workers, and the versions CI tests (tests/python/requirements.txt) lie inside
those ranges. Reads crates/python/pyproject.toml, and the installed wheel's
metadata where the package is installed."""

import importlib.metadata
import os
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "crates" / "python" / "pyproject.toml"
PINS = ROOT / "tests" / "python" / "requirements.txt"

# What each extra must name, and a version it must refuse (None: any).
# pyspark's Arrow path fails on the executors without pandas >= 2.2 and
# pyarrow, and pyspark 4.3 does not support pandas 3.
NEEDED = {
    "spark": {"pyspark": None, "pandas": ["2.1.4", "3.0.0"], "pyarrow": None},
    "ray": {"ray": None},
}


def extras():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in project["optional-dependencies"].items()}


def pins():
    got = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            got[req.name] = next(iter(req.specifier)).version
    return got


@pytest.mark.parametrize("extra", sorted(NEEDED))
def test_extra_names_what_its_module_needs(extra):
    reqs = {r.name: r for r in extras().get(extra, [])}
    for name, refused in NEEDED[extra].items():
        assert name in reqs, f"the {extra!r} extra lacks {name}"
        for version in refused or []:
            assert not reqs[name].specifier.contains(version), f"{extra}: {reqs[name]} admits {version}"
    if extra == "ray":
        assert "data" in reqs["ray"].extras, "refscore.ray needs Ray Data: ray[data]"


def test_ci_pins_satisfy_the_extras():
    pinned = pins()
    for extra, reqs in extras().items():
        for req in reqs:
            assert req.name in pinned, f"tests/python/requirements.txt does not pin {req.name} ({extra} extra)"
            assert req.specifier.contains(pinned[req.name]), \
                f"tests/python/requirements.txt pins {req.name}=={pinned[req.name]}, outside the {extra} extra's {req}"


def test_installed_wheel_declares_the_extras():
    try:
        declared = importlib.metadata.requires("refscore") or []
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("REFSCORE_REQUIRE_PACKAGE"):
            raise
        pytest.skip("the refscore package is not installed")
    got = {}
    for line in declared:
        req = Requirement(line)
        for extra in extras():
            if req.marker is not None and req.marker.evaluate({"extra": extra}):
                got.setdefault(extra, set()).add(str(Requirement(line.split(";")[0])))
    want = {extra: {str(r) for r in reqs} for extra, reqs in extras().items()}
    assert got == want
