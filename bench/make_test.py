"""How long `make test` takes on a fresh clone, the install included: what CI (`.ci/run`) and a
new developer wait for.

    python -m bench.make_test [--quick] [--keep] [--ref REF]

Clones this repository's committed ``REF`` (default HEAD; uncommitted changes are not in it) into
a temporary directory, runs ``make install`` and then ``make test`` there, timed apart, and counts
the tests each leg ran from pytest's closing lines. The clone has no venv, no embedded servers and
no caches (mypy's, ruff's, pytest's), as on a CI machine; pip's own cache is the machine's.

Figures: ``make_test_s`` (install + test, target <= 420 on the 2-core machine), ``install_s``,
``test_s``, ``tests_run`` (passed + failed + errors + skipped + xfailed + xpassed, both legs),
``tests_passed``, ``tests_failed``, and the load average at the start and the end: the machine is
shared, so the figure moves with it. ``--quick`` runs the unit tests only (``tests_run`` is then
not the suite's). The exit status is `make test`'s.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness

# pytest's closing line: "12 passed, 3 skipped, 1 xfailed in 4.20s" (with -q, or ===== around).
_CLOSING = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")
_COUNTED = ("passed", "failed", "error", "errors", "skipped", "xfailed", "xpassed")


def counts(output: str) -> dict[str, int]:
    """Tests by outcome, summed over every pytest closing line in ``output`` (one per leg)."""
    total: dict[str, int] = {}
    for line in output.splitlines():
        found = _CLOSING.match(line.strip())
        if found is None:
            continue
        for part in found.group(1).split(", "):
            number, _, outcome = part.strip().partition(" ")
            if outcome in _COUNTED and number.isdigit():
                key = "errors" if outcome == "error" else outcome
                total[key] = total.get(key, 0) + int(number)
    return total


def clean_env() -> dict[str, str]:
    """This process's environment without what would point the clone at this tree's venv or
    stores."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INNER_PLANE_", "PYTEST_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    venv_bin = str(harness.ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float]:
    """Run ``command``, its output echoed and appended to ``log``; its status and wall seconds."""
    started = time.perf_counter()
    with log.open("a") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sink.write(line)
        status = process.wait()
    return status, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="unit tests only")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    parser.add_argument("--ref", default="HEAD", help="what to clone (default HEAD)")
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="inner-plane-make-test-"))
    clone = where / "inner-plane"
    load_start = round(os.getloadavg()[0], 2)
    try:
        subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", str(harness.ROOT), str(clone)],
            check=True,
        )
        subprocess.run(["git", "checkout", "--quiet", args.ref], cwd=clone, check=True)
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=clone, check=True, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
        print(f"make test on a fresh clone of {commit} in {clone}", flush=True)
        env = clean_env()
        log = where / "make-test.log"
        install_status, install_s = timed(["make", "install"], clone, env, log)
        test_status, test_s = (1, 0.0)
        if install_status == 0:
            make = ["make", "test"]
            if args.quick:  # no RabbitMQ leg
                make = ["make", "lint", "typecheck", "test-suite", "PYTEST_ARGS=tests/unit"]
            test_status, test_s = timed(make, clone, env, log)
        found = counts(log.read_text())
        run = sum(found.values())
        status = install_status or test_status
        print(
            f"make test: exit {status}; install {install_s:.1f} s + test {test_s:.1f} s = "
            f"{install_s + test_s:.1f} s; {run} tests ({found})",
            flush=True,
        )
        harness.emit(
            {
                "make_test_s": round(install_s + test_s, 1),
                "install_s": round(install_s, 1),
                "test_s": round(test_s, 1),
                "tests_run": run,
                "tests_passed": found.get("passed", 0),
                "tests_failed": found.get("failed", 0) + found.get("errors", 0),
                "make_test_exit": status,
                "commit": commit,
                "loadavg_1m_at_start": load_start,
            }
        )
        return status
    finally:
        if args.keep:
            print(f"kept: {clone}", flush=True)
        else:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
