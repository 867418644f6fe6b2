"""Every sample's main() runs offline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parent.parent / "samples").glob("*.py")
    if p.stem != "__init__"
)


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
async def test_sample_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(f"sample_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (module.__doc__ or "").split("\n\n")[1].startswith("Run with:")
    await module.main()
    assert "handoff" in capsys.readouterr().out


async def test_pass_it_on_ends_at_refunds_after_two_handoffs() -> None:
    from samples.pass_it_on import main

    turn = await main(company="Fabrikam")
    assert turn.active_agent == "refunds"
    assert [(h.source, h.target) for h in turn.handoffs] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]
