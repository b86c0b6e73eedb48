"""Token counts of model input, labelled with how they were counted.

With the optional ``tiktoken`` package installed (``pip install 'inner-plane[tokenizer]'``) and
the model one it knows, text is counted with the model's own encoding. Otherwise, and for any
model tiktoken does not know (local models), the count is an estimate of 4 bytes per token of
UTF-8, and says so: every count carries its ``method`` (``tiktoken:o200k_base`` or
``estimate:4-bytes-per-token``), which compaction events record. tiktoken reads its encoding
files from its cache (``TIKTOKEN_CACHE_DIR``) or downloads them once; a deployment without
network access pre-seeds that cache or runs on the estimate.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ESTIMATE = "estimate:4-bytes-per-token"
BYTES_PER_TOKEN = 4
# Each message costs a few tokens of framing beyond its text (role, separators).
MESSAGE_OVERHEAD = 4


def _estimate(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@dataclass(frozen=True)
class Counter:
    """Counts tokens of text for one model; ``method`` says how."""

    method: str
    count: Callable[[str], int]

    def item(self, item: dict[str, Any]) -> int:
        """Tokens of one model input item: its text parts, or its JSON when it has none (a
        compaction item's encrypted content)."""
        content = item.get("content")
        if isinstance(content, str):
            return self.count(content) + MESSAGE_OVERHEAD
        if isinstance(content, list):
            texts = [str(p.get("text") or "") for p in content if isinstance(p, dict)]
            return self.count("".join(texts)) + MESSAGE_OVERHEAD
        return self.count(json.dumps(item, separators=(",", ":"))) + MESSAGE_OVERHEAD

    def items(self, items: list[dict[str, Any]]) -> int:
        return sum(self.item(item) for item in items)


@functools.lru_cache(maxsize=16)
def counter_for(model: str | None) -> Counter:
    """The model's tokenizer where tiktoken is installed and knows the model; else the
    labelled estimate."""
    if model:
        try:
            import tiktoken  # type: ignore[import-not-found, unused-ignore]

            encoding = tiktoken.encoding_for_model(model)
        except Exception:  # not installed, model unknown, or its encoding file unavailable
            encoding = None
        if encoding is not None:
            encode = encoding.encode

            def count(text: str) -> int:
                return len(encode(text, disallowed_special=()))

            return Counter(f"tiktoken:{encoding.name}", count)
    return Counter(ESTIMATE, _estimate)


# Per model, US dollars per million tokens: {"gpt-4.1-mini": {"input": 0.4, "cached": 0.1,
# "output": 1.6}} (INNER_PLANE_TOKEN_PRICES). Cached input is billed at "cached" instead of
# "input"; reasoning tokens are output tokens.
Prices = dict[str, dict[str, float]]
USAGE_FIELDS = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")


def usage_counts(usage: dict[str, Any]) -> dict[str, int]:
    """The four token counts of a usage record (a missing or odd value counts 0)."""
    counts: dict[str, int] = {}
    for key in USAGE_FIELDS:
        value = usage.get(key)
        counts[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return counts


def cost_usd(model: str | None, usage: dict[str, Any], prices: Prices) -> float | None:
    """The estimated cost of ``usage`` from the price table; None when the model has no price."""
    price = prices.get(model or "")
    if price is None:
        return None
    counts = usage_counts(usage)
    cached = min(counts["cached_tokens"], counts["input_tokens"])
    fresh = counts["input_tokens"] - cached
    total = (
        fresh * price.get("input", 0.0)
        + cached * price.get("cached", price.get("input", 0.0))
        + counts["output_tokens"] * price.get("output", 0.0)
    )
    return round(total / 1_000_000, 6)
