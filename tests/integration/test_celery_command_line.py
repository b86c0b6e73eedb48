"""`python -m workers` and the tests' Celery launcher load Celery's command line without what the
command does not run (``workers.command_line``): no prompt_toolkit for a worker or beat, Flower's
application only for `flower`. Every command is still there: `amqp repl` loads its shell when
it runs, `flower` is found when named, and the real ``click_repl`` is importable afterwards.
Each check runs in a fresh interpreter, as a worker starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.celery_main import __name__ as TESTS_LAUNCHER
from tests.support.stores import Stores

LOADED = """
import json, sys
sys.argv = ["celery", "-A", "workers", *{argv!r}]
from workers.command_line import load_celery_main
main = load_celery_main({argv!r}, extra_commands={extra!r})
loaded = {{name: name in sys.modules for name in
          ("celery.bin.celery", "prompt_toolkit", "wcwidth", "flower", "flower.app")}}
import click_repl
loaded["real click_repl"] = hasattr(click_repl, "repl")
print(json.dumps(loaded))
"""


def loaded(argv: list[str], extra: bool = True) -> dict[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(argv=argv, extra=extra)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["worker", "-Q", "signals"], True),
        (["beat", "-s", "/tmp/schedule"], True),
        (["worker", "-Q", "signals", "-n", "flower-node@%h"], True),  # named, not the command
        (["flower"], False),  # the tests' launcher: no other package's command at all
    ],
)
def test_a_worker_or_beat_loads_neither_the_shell_nor_flower(argv: list[str], extra: bool) -> None:
    found = loaded(argv, extra)
    assert found["celery.bin.celery"]
    assert not found["prompt_toolkit"] and not found["wcwidth"]
    assert not found["flower"] and not found["flower.app"]
    assert found["real click_repl"]  # the stand-in is gone once the command line is loaded


def test_flower_loads_its_command_when_named() -> None:
    found = loaded(["flower", "--address=127.0.0.1"])
    assert found["flower"]
    assert not found["prompt_toolkit"]


def test_every_command_is_still_there(stores: Stores) -> None:
    def run(*args: str, module: str = "workers") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=stores.env(),
            stdin=subprocess.DEVNULL,
        )

    flower = run("flower", "--help")
    assert flower.returncode == 0, flower.stderr
    assert "Web based tool for monitoring" in flower.stdout
    amqp = run("amqp", "--help")
    assert amqp.returncode == 0, amqp.stderr
    assert "repl" in amqp.stdout and "Start an interactive shell." in amqp.stdout
    # The shell itself runs on click_repl's real one (with no input it connects, then ends).
    repl = run("amqp", "repl")
    assert repl.returncode == 0, repl.stderr[-2000:]
    assert "-> connected." in repl.stdout + repl.stderr
    worker = run("-A", "workers", "worker", "--help", module=TESTS_LAUNCHER)
    assert worker.returncode == 0, worker.stderr
    assert "--concurrency" in worker.stdout
    missing = run("-A", "workers", "flower", "--help", module=TESTS_LAUNCHER)
    assert missing.returncode == 2 and "No such command 'flower'" in missing.stderr
