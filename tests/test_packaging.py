"""The package's metadata: what pip and a package index read from pyproject.toml."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def project() -> dict[str, Any]:
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    tomllib: Any = importlib.import_module("tomllib")  # pyright checks against Python 3.10
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_is_spdx_with_its_file() -> None:
    meta = project()
    assert meta["license"] == "MIT"  # an SPDX expression, not the deprecated table
    assert meta["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    assert not any(c.startswith("License ::") for c in meta["classifiers"])  # SPDX replaces them


@pytest.mark.parametrize(
    "extra",
    ["runtime", "openai", "azure", "postgres", "serve", "temporal", "redis", "otel", "a2a"],
    ids=lambda e: e,
)
def test_what_users_install_has_both_bounds(extra: str) -> None:
    """A lower bound (the oldest tested) and an upper one (the next major version)."""
    meta = project()
    requirements = (
        meta["dependencies"] if extra == "runtime" else meta["optional-dependencies"][extra]
    )
    assert requirements
    for requirement in requirements:
        if requirement in HELD_BELOW_A_MINOR:
            continue
        assert re.search(r">=[0-9][^,]*,<[0-9]+$", requirement), requirement


HELD_BELOW_A_MINOR = {"agent-framework-core>=1.23,<1.24"}
"""Requirements held below a minor release that breaks this package, until it is ported to it
(docs/getting-started.md says which and why)."""


def test_a_requirement_held_below_a_minor_release_is_documented() -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    for requirement in HELD_BELOW_A_MINOR:
        assert requirement in project()["dependencies"]
        assert f"`{requirement}`" in text


def test_python_versions_in_the_classifiers_match_requires_python() -> None:
    meta = project()
    assert meta["requires-python"] == ">=3.10"
    versions = {
        c.rsplit(" :: ", 1)[1]
        for c in meta["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert min(versions, key=lambda v: tuple(map(int, v.split(".")))) == "3.10"
