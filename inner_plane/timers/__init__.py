"""Timers: scheduled moments published as ``timer.due`` inner signals.

Timers carry no behaviour: a due moment becomes a signal with the timer's identity, scheduled
time, recurrence and purpose, and the shared recall and prompt path decides what it means.

Owns schedules, the missed-moment policy, the static timers file, the tick and the timers
API. May import ``publish``, ``journal``, ``runtime`` and the pure layer.
"""

from inner_plane.timers.api import (
    TimerInfo,
    add_timer,
    cancel_timer,
    get_timer,
    list_timers,
    set_timer,
)
from inner_plane.timers.policy import Decision, Missed, Outcome, decide
from inner_plane.timers.schedule import Cron, Interval, Once, Schedule, moment_key
from inner_plane.timers.spec import TimerError, TimerSpec
from inner_plane.timers.static import load_static_timers, parse_static_timers, timers_file
from inner_plane.timers.tick import TickReport, tick

__all__ = [
    "Cron",
    "Decision",
    "Interval",
    "Missed",
    "Once",
    "Outcome",
    "Schedule",
    "TickReport",
    "TimerError",
    "TimerInfo",
    "TimerSpec",
    "add_timer",
    "cancel_timer",
    "decide",
    "get_timer",
    "list_timers",
    "load_static_timers",
    "moment_key",
    "parse_static_timers",
    "set_timer",
    "tick",
    "timers_file",
]
