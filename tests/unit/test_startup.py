"""The collector held while a process loads (inner_plane/startup.py): off inside, back as it was
after (the outermost hold decides), what loading left frozen, and the same whatever the block
raises. And the processes that hold it: a worker's app, the served app, a pytest process."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inner_plane.startup import collector_held

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def frozen(value: object) -> bool:
    """Tracked by the collector but in none of its generations: in the permanent one."""
    return gc.is_tracked(value) and not any(o is value for o in gc.get_objects())


def test_held_inside_and_given_back_with_what_loaded_frozen(collecting: None) -> None:
    with collector_held():
        assert not gc.isenabled()
        loaded = [[n] for n in range(1000)]  # lists: always tracked
    assert gc.isenabled()
    assert frozen(loaded) and frozen(loaded[-1])


def test_nested_holds_leave_it_to_the_outermost(collecting: None) -> None:
    with collector_held():
        with collector_held():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collecting: None) -> None:
    gc.disable()
    with collector_held():
        loaded = [[n] for n in range(10)]
    assert not gc.isenabled()
    assert not frozen(loaded)  # (its caller decides when to freeze)


def test_given_back_when_loading_fails(collecting: None) -> None:
    with pytest.raises(ImportError), collector_held():
        raise ImportError("no such module")
    assert gc.isenabled()


PROBE = """
import gc, json, sys
for module in ("workers", "inner_plane.asgi"):
    __import__(module)
    if module == "inner_plane.asgi":
        sys.modules[module].create_app()  # what each `serve` process builds
    loaded = sorted({name.split(".")[0] for name in sys.modules})
    preloaded = sys.modules["workers.app"].preloaded_by_queue("openai").values()
    by_queue = sorted(name for names in preloaded for name in names if name in sys.modules)
    print(json.dumps([module, gc.isenabled(), gc.get_freeze_count(), loaded, by_queue]))
"""
# What a worker needs only once it sends to the outside or serves: loaded then, not at every
# start (httpx alone, with the command-line tools it loads, was about 50 ms of each start).
NOT_AT_WORKER_START = {"httpx", "rich", "pygments", "openai", "fastapi", "starlette", "uvicorn"}
# The MCP SDK (about half a second of CPU) is loaded by an API process's first MCP request.
NOT_AT_SERVER_START = {"mcp", "mcp_types"}


def test_the_app_modules_load_held_and_leave_the_collector_on() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=dict(env, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (workers, *worker_state), (asgi, *asgi_state) = map(json.loads, done.stdout.splitlines()[-2:])
    assert (workers, asgi) == ("workers", "inner_plane.asgi")
    assert worker_state[0] is True and worker_state[1] > 100_000  # the libraries, frozen
    assert set(worker_state[2]) & NOT_AT_WORKER_START == set()
    # The lane and the channels only in a worker consuming their queue (workers.app).
    assert worker_state[3] == []
    assert asgi_state[0] is True and asgi_state[1] > worker_state[1]  # and the API's after them
    assert set(asgi_state[2]) & NOT_AT_SERVER_START == set()


def test_this_pytest_process_collects_again_after_loading() -> None:
    # tests/support/collector.py held it while the suite loaded.
    assert gc.isenabled()
    assert gc.get_freeze_count() > 100_000


def test_python_m_workers_is_celerys_command_line_for_the_app() -> None:
    # What `inner-plane worker`, `beat` and `flower` exec (inner_plane/services/processes.py).
    done = subprocess.run(
        [sys.executable, "-m", "workers", "report"],
        env={k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "beat_schedule:PlaneScheduler" in done.stdout  # the plane's app, configured
