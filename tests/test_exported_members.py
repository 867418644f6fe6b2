"""The public API is exactly what __init__ exports (ruff's RUF022 keeps __all__ sorted)."""

import subprocess
import sys
import types

import pytest

import handoff_builder

PUBLIC_SUBMODULES = {"cli", "exceptions", "providers", "stores", "temporal", "testing"}


def test_all_lists_every_public_name() -> None:
    exported = handoff_builder.__all__
    assert len(exported) == len(set(exported))
    public = {name for name in dir(handoff_builder) if not name.startswith("_")}
    modules = {n for n in public if isinstance(getattr(handoff_builder, n), types.ModuleType)}
    assert modules <= PUBLIC_SUBMODULES  # imported submodules show up as attributes
    assert public - modules == set(exported)


def test_every_exported_name_resolves() -> None:
    for name in handoff_builder.__all__:
        assert getattr(handoff_builder, name) is not None, name


def test_an_unknown_name_is_an_attribute_error_that_names_it() -> None:
    with pytest.raises(AttributeError, match="no attribute 'HandoffBuilder'"):
        _ = handoff_builder.HandoffBuilder


def test_importing_the_package_leaves_the_hosting_layer_unloaded() -> None:
    """Building workflows does not pay for ConversationHost, the stores or sqlite3."""
    script = (
        "import sys, handoff_builder\n"
        "loaded = [m for m in ('handoff_builder._hosting', 'handoff_builder.stores', 'sqlite3')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from handoff_builder import ConversationHost\n"
        "assert ConversationHost.__module__ == 'handoff_builder._hosting'\n"
        "assert 'handoff_builder.stores' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # noqa: S603 - our script


def test_the_stores_module_is_an_attribute_of_the_package() -> None:
    script = (
        "import sys, handoff_builder\n"
        "assert 'handoff_builder.stores' not in sys.modules\n"
        "store = handoff_builder.stores.InMemoryConversationStore\n"
        "assert store.__module__.startswith('handoff_builder.stores')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # noqa: S603 - our script
