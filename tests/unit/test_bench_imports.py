"""Every benchmark module still imports: `make bench` runs them only on demand, so a name moved
in the library would otherwise break one unnoticed until then."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"))
def test_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert module.__name__ == f"bench.{name}"
