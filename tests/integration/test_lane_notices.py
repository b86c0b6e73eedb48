"""The journal announces a queued user turn or a journaled interrupt on the lane channel, in the
writing transaction; a running lane's listener turns that into its delegate's flag."""

from __future__ import annotations

import threading

from inner_plane.journal.lane.notices import INTERRUPT, USER_TURN, LaneNotice, listen
from inner_plane.lane.notices import LaneNotices
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime


def _url(runtime: Runtime) -> str:
    return runtime.engine.url.render_as_string(hide_password=False)


def test_turns_and_interrupts_are_announced_and_nothing_else(runtime: Runtime) -> None:
    heard: list[LaneNotice | None] = []
    arrived = threading.Condition()
    stop = threading.Event()

    def on_notice(notice: LaneNotice | None) -> None:
        with arrived:
            heard.append(notice)
            arrived.notify_all()

    thread = threading.Thread(target=listen, args=(_url(runtime), on_notice, stop), daemon=True)
    thread.start()
    try:
        with arrived:
            assert arrived.wait_for(lambda: heard == [None], 10)  # connected
        publish_many(
            [{"kind": "task.completed", "source": "copilot", "data": {"n": n}} for n in range(20)]
        )
        publish(kind="timer.due", source="timers", data={"timer": "t"}, delegate_id="d2")
        user_turn("d1", "hello")
        publish(kind="system.alert", source="ops", data={}, delegate_id="d3")
        with arrived:
            assert arrived.wait_for(lambda: len(heard) >= 3, 10)
        assert heard[1:] == [LaneNotice(USER_TURN, "d1"), LaneNotice(INTERRUPT, "d3")]
    finally:
        stop.set()
        thread.join(5)


def test_the_flag_of_the_watched_delegate_is_set(runtime: Runtime) -> None:
    notices = LaneNotices(_url(runtime))
    try:
        mine = notices.watch("d1")
        other = notices.watch("d2")
        assert notices.connected.wait(10)
        mine.clear()
        other.clear()
        user_turn("d1", "are you there?")
        assert mine.wait(10)
        assert not other.is_set()
        notices.unwatch("d1", mine)
        mine.clear()
        user_turn("d1", "again")
        user_turn("d2", "me too")
        assert other.wait(10) and not mine.is_set()
    finally:
        notices.stop()
