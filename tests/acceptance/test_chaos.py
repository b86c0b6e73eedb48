"""The plane outlives its stores: faults injected into a real `inner-plane up` on embedded
PostgreSQL and Redis, under a steady load of wakes, each judged from the journal after a bounded
settle: nothing lost, nothing duplicated, no overlapping activations, nothing delivered twice,
nothing stuck. One plane serves the module (in order); the last test ends it.

- `pg_ctl restart -m fast` run from outside `up`: adopted in one `!!` line, nothing restarted;
- kill -9 of the postmaster: restarted on the same socket;
- SIGSTOP of the postmaster for 20 s: waited for, not replaced;
- kill -9 of Redis: restarted on the same socket; what the broker had acknowledged and a worker
  had not journaled (taken by BRPOP and not yet recorded, or held by a signals worker that
  kombu's lost-connection crash ends) is journaled from its receipt;
- kill -9 of a signals worker holding a publication it took but had not read: the broker no
  longer has it anywhere, and its receipt brings it to the journal;
- kill -9 of the activation worker mid-run, with no new traffic for its delegate: the sweeper
  recovers its claims well within the lease TTL (the liveness rule);
- a store that cannot come back: the plane stops past INNER_PLANE_STORE_DOWN_DEADLINE_S, saying
  what it tried, and leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_up import plane_processes, processes_mentioning, wait_gone
from tests.support.chaos import (
    Load,
    Plane,
    assert_load_clean,
    broker_holds,
    judge,
    kill_signals_worker_holding_a_wake,
    running_activation,
    send_wake,
    wait_delivered,
)
from tests.support.processes import children_of
from tests.support.waiting import wait_until

# The first test also waits for `up` to be ready (the module's plane): on two shared cores under
# load that alone may take minutes.
pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.chaos,
    pytest.mark.timeout(900),
    pytest.mark.slow(reason="a fault, its recovery and a settle under load; a 40 s store deadline"),
]

DELEGATES = [f"chaos-{n}" for n in range(8)]
# Short against the lease TTL of 60 s (and the broker's visibility timeout), long against a
# sweep period of 2 s and a Celery worker's restart on a loaded machine.
RECOVERY_BOUND_S = 40
DEADLINE_S = 40  # INNER_PLANE_STORE_DOWN_DEADLINE_S: past the 20 s SIGSTOP below
CHILDREN = ("signals-worker", "activation-worker", "user-turns-worker", "periodic-worker", "beat")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    base = tmp_path_factory.mktemp("chaos")
    data_dir = (base / "plane").resolve()
    started = Plane.start(
        data_dir, base, INNER_PLANE_STORE_DOWN_DEADLINE_S=str(DEADLINE_S), ready_s=300
    )
    try:
        yield started
    finally:
        started.stop()
        started.close()
        for pid in set(plane_processes(data_dir)) | set(processes_mentioning(str(data_dir))):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def assert_clean(plane: Plane, load: Load) -> None:
    assert_load_clean(plane, DELEGATES, load)


def assert_children_kept(plane: Plane, mark: int) -> None:
    """`up` still runs, and no worker or beat was stopped or restarted for the store's fault."""
    assert plane.up.process is not None and plane.up.process.poll() is None, plane.output()[-3000:]
    lines = plane.supervisor_lines(mark)
    touched = [line for line in lines if any(f" {name} " in line for name in CHILDREN)]
    assert touched == [], touched
    assert not any("error:" in line or "stopping" in line for line in lines), lines


def test_an_external_pg_ctl_restart_is_adopted_and_loses_nothing(plane: Plane) -> None:
    before = plane.postmaster()
    mark = len(plane.output())
    with Load(plane, DELEGATES) as load:
        time.sleep(3)
        done = plane.pg_ctl_restart()
        assert done.returncode == 0, (plane.data_dir / "pg_ctl.log").read_text()[-2000:]
        after = plane.postmaster()
        assert after != before
        wait_until(lambda: plane.alarms(mark), "up to notice the restart", 30)
        time.sleep(5)
    assert_clean(plane, load)
    # One adoption, naming the adopted postmaster; nothing restarted over it. (On a loaded
    # machine the new postmaster may take longer than the keeper's quiet wait to answer: a
    # "waiting for it" line may come first.)
    alarms = plane.alarms(mark)
    [alarm] = [line for line in alarms if "adopting it" in line]
    assert f"another PostgreSQL (pid {after})" in alarm, alarm
    others = [line for line in alarms if line != alarm]
    assert all("waiting for it" in line or "answers again" in line for line in others), alarms
    assert plane.postmaster() == after
    assert_children_kept(plane, mark)


def test_kill_9_of_the_postmaster_is_restarted_and_loses_nothing(plane: Plane) -> None:
    mark = len(plane.output())
    with Load(plane, DELEGATES) as load:
        time.sleep(3)
        os.kill(plane.postmaster(), signal.SIGKILL)
        plane.up.wait_for("!! embedded PostgreSQL is back", timeout=120, after=mark)
        time.sleep(5)
    assert_clean(plane, load)
    # (The postmaster the previous test adopted is not `up`'s child: its exit status is unknown.)
    assert "; restarting it on" in plane.alarms(mark)[0], plane.alarms(mark)
    assert_children_kept(plane, mark)


def test_a_postmaster_stopped_for_20_s_is_waited_for_and_loses_nothing(plane: Plane) -> None:
    postmaster = plane.postmaster()
    mark = len(plane.output())
    with Load(plane, DELEGATES) as load:
        time.sleep(3)
        os.kill(postmaster, signal.SIGSTOP)
        try:
            time.sleep(20)
        finally:
            os.kill(postmaster, signal.SIGCONT)
        plane.up.wait_for("answers again", timeout=60, after=mark)
        time.sleep(3)
    assert_clean(plane, load)
    assert plane.postmaster() == postmaster  # waited for, never replaced
    alarms = plane.alarms(mark)
    assert "does not answer" in alarms[0] and "answers again" in alarms[-1], alarms
    assert_children_kept(plane, mark)


def test_kill_9_of_redis_is_restarted_and_loses_nothing(plane: Plane) -> None:
    mark = len(plane.output())
    with Load(plane, DELEGATES) as load:
        time.sleep(3)
        os.kill(plane.redis_pid(), signal.SIGKILL)
        plane.up.wait_for("!! embedded Redis is back", timeout=60, after=mark)
        time.sleep(5)
    assert "killed by signal 9; restarting it on" in plane.alarms(mark)[0]
    assert plane.up.process is not None and plane.up.process.poll() is None
    # Every wake the broker acknowledged is journaled and delivered, including one taken by a
    # worker's BRPOP and not yet recorded as unacknowledged when Redis died, or one held by
    # the signals worker that kombu's restore on the lost connection crashes (`up` restarts
    # it): their receipts are journaled by the sweeper.
    assert_clean(plane, load)
    # Each worker's consumer rebuilt its connection without a step failing on the way: an error
    # line here would send an operator looking for a fault that was not theirs.
    restarts = [line for line in plane.output(mark).splitlines() if "Error on restarting" in line]
    assert restarts == [], restarts


def test_a_killed_activation_is_recovered_by_the_sweeper_without_new_traffic(
    plane: Plane,
) -> None:
    """kill -9 of the whole activation worker (its main process and pool child) mid-run; nothing
    new is sent for the delegate, and the killed worker's messages stay unacknowledged in the
    broker. The dead holder's lease has about 60 s left, yet the next sweep (every 2 s) sees its
    liveness lock free and wakes the delegate; the worker `up` restarts recovers the claims."""
    delegate = "chaos-quiet"
    task = send_wake(plane, delegate)
    run = wait_until(lambda: running_activation(plane.engine, delegate), "a running activation", 60)
    worker = plane.started_pid("activation-worker")
    assert int(run.holder.split(":")[1]) in {worker, *children_of(worker)}
    mark = len(plane.output())
    killed = time.monotonic()
    os.killpg(worker, signal.SIGKILL)
    wait_delivered(plane, task, timeout=RECOVERY_BOUND_S)
    assert time.monotonic() - killed < RECOVERY_BOUND_S
    assert "activation-worker was killed by signal 9" in plane.output(mark)
    verdict = judge(plane.engine, [delegate], [task], settle_s=30)
    assert verdict.clean(), verdict


def test_a_publication_taken_by_a_signals_worker_that_dies_is_journaled_from_its_receipt(
    plane: Plane,
) -> None:
    """Celery's Redis transport hands a message over destructively: the worker's BRPOP pops it,
    and only the worker's next command records it as unacknowledged. The signals worker is
    paused with its BRPOP outstanding; a wake is sent (acknowledged: the broker held it, and
    handed it at once to the paused worker's socket), and the worker is killed. The broker has
    the wake nowhere, neither queued nor unacknowledged; before receipts it was lost for good.
    Its receipt brings it to the journal within the grace and a sweep."""
    delegate = "chaos-handed"
    mark = len(plane.output())
    task, _killed = kill_signals_worker_holding_a_wake(plane, delegate)
    assert broker_holds(plane, task) is None  # neither queued nor unacknowledged: gone
    plane.up.wait_for("signals-worker was killed by signal 9", timeout=30, after=mark)
    wait_delivered(plane, task, timeout=RECOVERY_BOUND_S + 20)
    verdict = judge(plane.engine, [delegate], [task], settle_s=30)
    assert verdict.clean(), verdict
    assert "event=receipts_replayed" in plane.output(mark)


def test_a_store_that_cannot_come_back_stops_the_plane_saying_what_it_tried(
    plane: Plane,
) -> None:
    """Redis killed, and its socket path taken by a directory: every restart fails. Past the
    deadline (not before) `up` stops every process, with one line naming what it tried."""
    redis_pid, socket_path = plane.redis_pid(), plane.redis_socket()
    everything = set(plane_processes(plane.data_dir)) | {plane.postmaster()}
    mark = len(plane.output())
    os.kill(redis_pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        socket_path.unlink()
    socket_path.mkdir()
    killed = time.monotonic()
    process = plane.up.process
    assert process is not None
    assert process.wait(DEADLINE_S + 120) == 1
    assert time.monotonic() - killed > DEADLINE_S
    lines = plane.supervisor_lines(mark)
    [error] = [line for line in lines if "error:" in line]
    assert "embedded Redis unreachable for more than 40 s" in error, error
    assert "INNER_PLANE_STORE_DOWN_DEADLINE_S" in error and "restarted it" in error, error
    assert "last error:" in error, error
    # PostgreSQL, restarted by `up` in an earlier test, is stopped in order and named.
    assert lines[-1].startswith("inner-plane: stopped: "), lines[-1]
    assert "embedded PostgreSQL (pid" in lines[-1], lines[-1]
    assert wait_gone(everything) == set()
    socket_path.rmdir()
    assert not Path(plane.data_dir / "plane.json").exists()
