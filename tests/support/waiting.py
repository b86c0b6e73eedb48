"""Polling a condition until it holds, for tests that wait on real processes.

One helper for every acceptance test: a timeout is a test failure naming what was awaited, never
a silent pass, and the value that satisfied the condition is returned so the test can use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T | None],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.05,
    explain: Callable[[], object] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy and return that; fail after ``timeout``,
    with what ``explain`` then says of the state the wait ended in (a failure seen once in a
    loaded run cannot be run again to find out)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            found = "" if explain is None else f"; found: {explain()}"
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{found}")
        time.sleep(interval)
