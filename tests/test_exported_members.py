"""The public API is exactly what __init__ exports (ruff's RUF022 keeps __all__ sorted)."""

import handoff_builder


def test_all_lists_every_public_name() -> None:
    exported = handoff_builder.__all__
    assert len(exported) == len(set(exported))
    public = {name for name in dir(handoff_builder) if not name.startswith("_")}
    submodules = {"cli", "exceptions", "stores", "testing"}
    assert public - submodules == set(exported)
