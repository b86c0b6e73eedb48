"""How the suite's time is spent: the order files are handed to pytest-xdist workers, and the
tests over a minute that are not marked ``slow`` (listed, never failed: timing is not a verdict).

`make test` runs ``pytest -n N --dist loadfile --no-loadscope-reorder``: each file goes whole to
one worker (module fixtures and in-order modules stay intact), in collection order. This plugin
sorts the collection so the longest files come first (longest processing time first): a long file
left to the end would run alone while the other workers idle. How long a file takes comes from
``file_seconds.json`` beside this module (measured); a file it does not name is estimated from its
number of tests and its kind. Refresh the table from a run's JUnit XML:

    pytest -n 4 --dist loadfile --junitxml=/tmp/suite.xml
    python -m tests.support.timing /tmp/suite.xml > tests/support/file_seconds.json
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("file_seconds.json")
TESTS = Path(__file__).resolve().parents[1]
# Seconds per test of a file the table does not name, by the folder it is filed in.
PER_TEST_S = {"acceptance": 20.0, "integration": 1.0, "unit": 0.05}
SLOW_S = 60.0


def file_seconds() -> dict[str, float]:
    try:
        table = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in table.items()}


def _relative(item: pytest.Item) -> str:
    path = item.path
    return str(path.relative_to(TESTS.parent)) if path.is_relative_to(TESTS.parent) else str(path)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first, on xdist workers (whose collection order is the schedule); the tests
    of a file keep their order and stay together. A run in one process keeps pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    known = file_seconds()
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[_relative(item)] += 1

    def weight(name: str) -> float:
        if name in known:
            return known[name]
        parts = Path(name).parts
        kind = parts[1] if len(parts) > 2 and parts[0] == "tests" else "unit"
        return counts[name] * PER_TEST_S.get(kind, PER_TEST_S["unit"])

    first_seen = {name: n for n, name in reversed(list(enumerate(map(_relative, items))))}
    items.sort(key=lambda item: (-weight(_relative(item)), first_seen[_relative(item)]))


class SlowTests:
    """Each test's setup, call and teardown seconds, as the reports arrive (on the xdist
    controller too), and whether it is marked ``slow``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.marked: set[str] = set()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if "slow" in report.keywords:
            self.marked.add(report.nodeid)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        over = sorted(
            ((s, n) for n, s in self.seconds.items() if s > SLOW_S and n not in self.marked),
            reverse=True,
        )
        if not over:
            return
        terminalreporter.section(f"over {SLOW_S:g} s and not marked slow (on this machine's load)")
        for seconds, nodeid in over:
            terminalreporter.write_line(f"{seconds:7.1f}s {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SlowTests(), "inner-plane-slow-tests")


def from_junit(path: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit XML report (setup, call and teardown summed)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        # classname is the dotted module path, plus the class for a test in a class.
        for end in range(len(parts), 0, -1):
            candidate = Path(*parts[:end]).with_suffix(".py")
            if (TESTS.parent / candidate).exists():
                seconds[str(candidate)] += float(case.get("time", "0"))
                break
    return {name: round(s, 1) for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    print(json.dumps(from_junit(Path(sys.argv[1])), indent=1))
