"""pytest's assertion-rewritten bytecode, written once before `make test` (`make bytecode`).

    python -m tests.support.rewrite_cache

pytest rewrites the asserts of each test module, conftest and ``pytest_plugins`` module, and of
every module of its plugins' packages (hypothesis, schemathesis, xdist, ...), as it imports them,
and keeps the result beside them in ``__pycache__/*-pytest-*.pyc``, unless
PYTHONDONTWRITEBYTECODE is set, as on CI machines. Then each of `make test`'s pytest processes
(four workers and the RabbitMQ leg's) rewrote them all again: about 12 s of CPU per process
before its first test, on two cores shared by six of them. This writes that cache once, the files
split over every core, with pytest's own rewriting (so the code is what pytest would write). pytest
checks each cached file against its source's hash when it reads it: a test edited since is
rewritten as before.

Best effort: a file that does not compile, or a pytest whose private rewrite API changed, is
left to pytest itself (a line says so).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# The plugin the test suite names in `pytest_plugins` (tests/conftest.py).
PLUGINS = [TESTS / "support" / "timing.py"]


class _State:
    """What pytest's writer needs of its AssertionState (a trace on errors)."""

    def trace(self, *_args: object) -> None:
        return None


def test_files() -> list[Path]:
    """What pytest rewrites of this project: test modules (python_files: test_*.py, *_test.py),
    conftests, and the pytest_plugins modules."""
    found = {*TESTS.rglob("test_*.py"), *TESTS.rglob("*_test.py"), *TESTS.rglob("conftest.py")}
    return sorted(p for p in found | set(PLUGINS) if "__pycache__" not in p.parts)


def plugin_files() -> list[Path]:
    """Every module of the distributions that register a pytest plugin (pytest marks all their
    top-level packages and modules for rewriting)."""
    files: set[Path] = set()
    for dist in importlib.metadata.distributions():
        if not any(ep.group == "pytest11" for ep in dist.entry_points):
            continue
        for name in dist.files or []:
            if str(name).endswith(".py") and ".." not in str(name):
                files.add(Path(str(dist.locate_file(name))))
    return sorted(p for p in files if p.is_file())


def _rewrite(paths: list[Path]) -> tuple[int, int]:
    """Write the rewritten bytecode of ``paths`` not cached yet; (written, failed)."""
    from _pytest.assertion import rewrite

    written = failed = 0
    for path in paths:
        pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
        try:
            if rewrite._read_pyc(path, pyc) is not None:
                continue
            # No config: the code pytest writes when enable_assertion_pass_hook is off (its
            # default, and this project's).
            source_hash, code = rewrite._rewrite_test(path, None)  # type: ignore[arg-type]
            if rewrite.try_makedirs(pyc.parent) and rewrite._write_pyc(
                _State(),  # type: ignore[arg-type]
                code,
                source_hash,
                pyc,
            ):
                written += 1
        except Exception:
            failed += 1
    return written, failed


def main() -> int:
    paths = test_files() + plugin_files()
    workers = os.cpu_count() or 1
    # Interleaved shares: the big test modules spread over the processes.
    shares = [paths[n::workers] for n in range(workers)]
    try:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_rewrite, shares))
    except (ImportError, AttributeError) as error:  # pytest changed: it rewrites them itself
        print(f"rewrite_cache: skipped ({error})", file=sys.stderr)
        return 0
    written = sum(w for w, _ in results)
    failed = sum(f for _, f in results)
    print(
        f"rewrite_cache: {written} of {len(paths)} modules rewritten for pytest"
        + (f" ({failed} left to pytest)" if failed else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
