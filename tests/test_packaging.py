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
        assert re.search(r">=[0-9][^,]*,<[0-9]+$", requirement), requirement


def test_getting_started_names_the_agent_framework_requirement() -> None:
    """The page that says which agent-framework-core versions are tested names the requirement."""
    [requirement] = [r for r in project()["dependencies"] if r.startswith("agent-framework-core")]
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
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
