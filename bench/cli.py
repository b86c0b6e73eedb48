"""How fast the CLI answers: wall time of `inner-plane --help`, `inner-plane signals show ID` and
`inner-plane status --json`, each a fresh process, against a bare `python -c pass` measured in
the same run, in rotating order.

    python -m bench.cli [--quick]

Figures: ``cli_start_ms`` (p50 per command), ``cli_vs_python_start`` (`--help` over the bare
interpreter, target <= 6), and the same ratio for `signals show` (``cli_show_vs_python_start``)
and `status` (``cli_status_vs_python_start``), targets <= 6 (issue 30). The CPU time of each run
(user + system, ``cli_cpu_ms``) is reported too, with the same ratios of it (``*_cpu_vs_python``):
on a shared machine it moves far less with the load than the wall time does.

Two more baselines say how low those two commands could go: a process that only imports the
libraries `signals show` cannot do without (psycopg, the journal's driver, and pydantic-settings,
the settings' library; the collector off while they load, as the CLI has it), and the same with
redis-py as `status` imports it (without OpenTelemetry's metrics SDK): ``cli_floor_vs_python_start``
and ``cli_status_floor_vs_python_start``, with their CPU ratios. A command's ratio minus its
floor's is what the CLI itself costs. Each library alone, too: ``cli_psycopg_floor_vs_python_start``
and ``cli_settings_floor_vs_python_start``.

What "bare Python" is: the project's own interpreter, as a developer's checkout has it. Its start
includes the editable install's import finder (`make install` installs the package editable,
and that finder's module loads pathlib, importlib.util and the rest at every start), which a
wheel installed for production does not have. ``interpreter_start_ms`` is the same interpreter
with no site-packages at all (``-S``; moving the finder's ``.pth`` aside gives the same start),
``editable_finder_share`` the share of bare Python's start that the interpreter alone does not
account for, and ``cli_show_vs_interpreter_start`` `signals show` over it: near what a production
install's ratio would be.
"""

from __future__ import annotations

import compileall
import os
import resource
import subprocess
import sys
import time

from bench import harness
from bench.harness import median, p99, ratio, verdict

ROUNDS = 5 if harness.QUICK else 15

# The libraries `signals show` needs, loaded as the CLI loads them (the collector off, and what
# they made frozen before the interpreter's last sweep).
FLOOR = "import gc; gc.disable(); import psycopg, pydantic_settings; gc.freeze()"
# And `status`'s: redis-py too, without the metrics SDK (inner_plane.cli.common.import_redis_lean).
STATUS_FLOOR = (
    "import gc, sys; gc.disable(); import psycopg, pydantic_settings; "
    "sys.modules['opentelemetry.sdk.metrics'] = None; import redis; gc.freeze()"
)
# Each of the two libraries alone: which of them the floor is made of. The journal's driver
# imports asyncio (its async classes are defined at import) and reads its own version through
# importlib.metadata; the settings' library builds on pydantic's models.
PSYCOPG_FLOOR = "import gc; gc.disable(); import psycopg; gc.freeze()"
SETTINGS_FLOOR = "import gc; gc.disable(); import pydantic_settings; gc.freeze()"
FLOORS = ("floor", "status_floor", "psycopg_floor", "settings_floor")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ms(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of ``command``."""
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=harness.ROOT, capture_output=True, timeout=120)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode not in (0, 1, 2):
        raise RuntimeError(f"{command}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed, (children_cpu_s() - cpu_before) * 1000


def main() -> None:
    # The CLI as installed: pip writes the package's bytecode at install (as `make install`
    # does here), which a machine with PYTHONDONTWRITEBYTECODE would otherwise never keep.
    compileall.compile_dir(harness.ROOT / "inner_plane", quiet=1)
    with harness.stores("cli") as stores:
        env = stores.env()
        from inner_plane import publish
        from inner_plane.config import build_settings
        from inner_plane.runtime import build_runtime

        settings = build_settings(
            database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
        )
        runtime = build_runtime(settings)
        signal_id = publish(kind="task.completed", source="bench", runtime=runtime).id
        python = [sys.executable]
        cli = [sys.executable, "-m", "inner_plane"]
        commands = {
            "python": [*python, "-c", "pass"],
            "interpreter": [*python, "-S", "-c", "pass"],
            "help": [*cli, "--help"],
            "signals_show": [*cli, "signals", "show", str(signal_id)],
            "status": [*cli, "status", "--json"],
            "floor": [*python, "-c", FLOOR],
            "status_floor": [*python, "-c", STATUS_FLOOR],
            "psycopg_floor": [*python, "-c", PSYCOPG_FLOOR],
            "settings_floor": [*python, "-c", SETTINGS_FLOOR],
        }
        # One warm-up each: the first run pays for cold file caches, not for the CLI.
        for command in commands.values():
            run_ms(command, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for round_ in range(ROUNDS):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                wall, used = run_ms(commands[name], env)
                samples[name].append(wall)
                cpu[name].append(used)

    p50 = {name: round(median(values), 1) for name, values in samples.items()}
    cpu50 = {name: round(median(values), 1) for name, values in cpu.items()}
    cli_names = ("help", "signals_show", "status")
    ratios = {
        "cli_vs_python_start": ratio(p50["help"], p50["python"], 2),
        "cli_show_vs_python_start": ratio(p50["signals_show"], p50["python"], 2),
        "cli_status_vs_python_start": ratio(p50["status"], p50["python"], 2),
        "cli_show_cpu_vs_python": ratio(cpu50["signals_show"], cpu50["python"], 2),
        "cli_status_cpu_vs_python": ratio(cpu50["status"], cpu50["python"], 2),
        "cli_floor_vs_python_start": ratio(p50["floor"], p50["python"], 2),
        "cli_status_floor_vs_python_start": ratio(p50["status_floor"], p50["python"], 2),
        "cli_floor_cpu_vs_python": ratio(cpu50["floor"], cpu50["python"], 2),
        "cli_status_floor_cpu_vs_python": ratio(cpu50["status_floor"], cpu50["python"], 2),
        "cli_psycopg_floor_vs_python_start": ratio(p50["psycopg_floor"], p50["python"], 2),
        "cli_settings_floor_vs_python_start": ratio(p50["settings_floor"], p50["python"], 2),
    }
    figures = {
        "cli_start_ms": {name: p50[name] for name in cli_names},
        "cli_start_p99_ms": {name: round(p99(samples[name]), 1) for name in samples},
        "python_start_ms": p50["python"],
        "interpreter_start_ms": p50["interpreter"],
        "editable_finder_share": ratio(p50["python"] - p50["interpreter"], p50["python"], 2),
        "cli_show_vs_interpreter_start": ratio(p50["signals_show"], p50["interpreter"], 2),
        **ratios,
        "cli_cpu_ms": {
            name: cpu50[name] for name in ("python", "interpreter", *cli_names, *FLOORS)
        },
        "rounds": ROUNDS,
        "cpu_count": os.cpu_count(),
    }
    for name in names:
        print(
            f"{name:>13}: p50 {p50[name]:7.1f} ms  p99 {p99(samples[name]):7.1f} ms"
            f"  cpu p50 {cpu50[name]:7.1f} ms"
        )
    for label, key in (
        ("--help", "cli_vs_python_start"),
        ("signals show", "cli_show_vs_python_start"),
        ("status", "cli_status_vs_python_start"),
    ):
        print(
            f"{label} over bare python: {ratios[key]}x "
            + verdict(ratios[key], 6, higher_is_better=False)
        )
    print(
        f"floors: signals show's libraries {ratios['cli_floor_vs_python_start']}x "
        f"(cpu {ratios['cli_floor_cpu_vs_python']}x), status's "
        f"{ratios['cli_status_floor_vs_python_start']}x "
        f"(cpu {ratios['cli_status_floor_cpu_vs_python']}x); psycopg alone "
        f"{ratios['cli_psycopg_floor_vs_python_start']}x, pydantic-settings alone "
        f"{ratios['cli_settings_floor_vs_python_start']}x"
    )
    print(
        f"bare python: {p50['python']} ms, of which {figures['editable_finder_share']:.0%} is "
        f"site-packages (the editable install's finder); the interpreter alone "
        f"{p50['interpreter']} ms, and signals show over it "
        f"{figures['cli_show_vs_interpreter_start']}x"
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
