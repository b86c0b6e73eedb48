"""How the suite's time is spent: the order files are handed to pytest-xdist workers, and the
tests over a minute that are not marked ``slow`` (listed, never failed: timing is not a verdict).

`make test` runs ``pytest -n N --dist loadfile --no-loadscope-reorder``: each file goes whole to
one worker (module fixtures and in-order modules stay intact), in collection order. This plugin
sorts the collection so the longest files come first (longest processing time first): a long file
left to the end would run alone while the other workers idle. How long a file takes comes from
``file_seconds.json`` beside this module (measured); a file it does not name is estimated from its
number of tests and its kind. Refresh the table from a `make test` run's per-test table (the
files' seconds as they run side by side, under the run's load) or from a JUnit XML:

    python -m tests.support.timing .inner-plane-test/tmp/suite.tests.json \
        > tests/support/file_seconds.json
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("file_seconds.json")
TESTS = Path(__file__).resolve().parents[1]
# Seconds per test of a file the table does not name, by the folder it is filed in.
PER_TEST_S = {"acceptance": 20.0, "integration": 1.0, "unit": 0.05}
SLOW_S = 60.0
# How many files the closing CPU table lists.
CPU_FILES = 15


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


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its children reaped so far (a child's reaped
    children included): what a test phase cost the machine, as far as this process can see
    (the shared embedded PostgreSQL and Redis are not its children)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "teardown")


def _measured(item: pytest.Item, when: str) -> Iterator[None]:
    """The phase's CPU seconds as a user property of its report (which reaches the xdist
    controller with it)."""
    started = _cpu_seconds()
    yield
    item.user_properties.append((f"cpu_s_{when}", round(_cpu_seconds() - started, 3)))


class SlowTests:
    """Each test's setup, call and teardown seconds, as the reports arrive (on the xdist
    controller too), and whether it is marked ``slow``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)
        self.marked: set[str] = set()
        self.cpu: dict[str, float] = defaultdict(float)  # by file
        self.test_cpu: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.phases[report.nodeid][report.when] = report.duration
        if "slow" in report.keywords:
            self.marked.add(report.nodeid)
        for name, value in report.user_properties:
            if name == f"cpu_s_{report.when}" and isinstance(value, (int, float)):
                self.cpu[report.nodeid.split("::")[0]] += value
                self.test_cpu[report.nodeid] += value

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        self._cpu_table(terminalreporter)
        self._over_a_minute(terminalreporter)

    def _cpu_table(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The files that cost the most CPU (their tests' own and their child processes'): on
        a machine with fewer cores than busy workers, the run's wall time follows the total."""
        if not self.cpu:
            return
        total = sum(self.cpu.values())
        terminalreporter.section(f"CPU: {total:.0f} s in the test processes and their children")
        ranked = sorted(self.cpu.items(), key=lambda kv: -kv[1])[:CPU_FILES]
        for name, seconds in ranked:
            terminalreporter.write_line(f"{seconds:7.1f}s {name}")

    def _over_a_minute(self, terminalreporter: pytest.TerminalReporter) -> None:
        over = sorted(
            ((s, n) for n, s in self.seconds.items() if s > SLOW_S and n not in self.marked),
            reverse=True,
        )
        if not over:
            return
        terminalreporter.section(f"over {SLOW_S:g} s and not marked slow (on this machine's load)")
        for seconds, nodeid in over:
            # A module's or session's fixtures count in its first test's setup, last's teardown.
            phases = ", ".join(f"{w} {s:.1f}" for w, s in self.phases[nodeid].items())
            terminalreporter.write_line(f"{seconds:7.1f}s {nodeid} ({phases})")

    def write(self, path: Path) -> None:
        """Each test's wall and CPU seconds, longest first (what the closing tables sum)."""
        rows = [
            {"test": n, "wall_s": round(s, 3), "cpu_s": round(self.test_cpu.get(n, 0.0), 3)}
            for n, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        ]
        path.write_text(json.dumps(rows, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SlowTests(), "inner-plane-slow-tests")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With --basetemp DIR, the run's per-test table goes to DIR.tests.json (beside it: pytest
    empties DIR at the next start); xdist workers leave it to their controller."""
    basetemp = session.config.option.basetemp
    plugin = session.config.pluginmanager.get_plugin("inner-plane-slow-tests")
    if basetemp and isinstance(plugin, SlowTests) and not os.environ.get("PYTEST_XDIST_WORKER"):
        with contextlib.suppress(OSError):
            plugin.write(Path(f"{Path(basetemp).resolve()}.tests.json"))


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


def from_tests_json(path: Path) -> dict[str, float]:
    """Seconds per test file from a run's DIR.tests.json (see pytest_sessionfinish)."""
    seconds: dict[str, float] = defaultdict(float)
    for row in json.loads(path.read_text()):
        seconds[str(row["test"]).split("::")[0]] += float(row["wall_s"])
    return {name: round(s, 1) for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    source = Path(sys.argv[1])
    table = from_tests_json(source) if source.suffix == ".json" else from_junit(source)
    print(json.dumps(table, indent=1))
