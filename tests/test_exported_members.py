"""The public API is exactly what __init__ exports (ruff's RUF022 keeps __all__ sorted)."""

import types

import handoff_builder

PUBLIC_SUBMODULES = {"cli", "exceptions", "providers", "stores", "testing"}


def test_all_lists_every_public_name() -> None:
    exported = handoff_builder.__all__
    assert len(exported) == len(set(exported))
    public = {name for name in dir(handoff_builder) if not name.startswith("_")}
    modules = {n for n in public if isinstance(getattr(handoff_builder, n), types.ModuleType)}
    assert modules <= PUBLIC_SUBMODULES  # imported submodules show up as attributes
    assert public - modules == set(exported)
