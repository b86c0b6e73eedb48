"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from inner_plane.runtime import Runtime


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    """The test runtime with batching off: a lane run opens each signal's activation at once.
    (A file that needs other settings beside these defines its own.)"""
    settings = runtime.settings.model_copy(update={"batch_quiet_ms": 0, "batch_max_age_ms": 0})
    yield replace(runtime, settings=settings)
