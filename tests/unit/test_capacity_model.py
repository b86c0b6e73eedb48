"""Every figure the capacity model in docs/operations.md uses is a key of a benchmark's final
JSON line, so it can be re-measured with one command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def capacity_section() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("## Capacity model")
    return text[start : text.index("\n## ", start + 1)]


def test_every_capacity_figure_is_a_benchmark_key() -> None:
    section = capacity_section()
    # The figures table: | what | `key` ... | value |
    keys = set(re.findall(r"`([a-z0-9_]+_per_[a-z0-9_]+)`", section))
    assert {
        "signals_per_s_per_signals_worker",
        "activations_per_s_per_activation_worker",
        "journal_bytes_per_1000_signals",
    } <= keys
    sources = {path.name: path.read_text() for path in (ROOT / "bench").glob("*.py")}
    for key in keys:
        assert any(f'"{key}"' in source for source in sources.values()), (
            f"{key} is in docs/operations.md but in no benchmark's JSON"
        )
    # The formula uses the measured names, not numbers typed in by hand.
    for key in ("signals_per_s_per_signals_worker", "plane_ms_per_activation"):
        assert key in section.split("```")[1], key
