"""What the UI's templates show, computed from the read API's data: timeline entries with the
parts an operator expands, and chart geometry (inline SVG, drawn on the server: no chart
library, nothing fetched by the browser). Pure functions."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from inner_plane import tracing
from inner_plane.journal.conversation import events
from inner_plane.journal.signals.events import history
from inner_plane.timeline import TimelineEntry

DEFAULT_ZONE = "UTC"


def zone_of(delegate_id: Any, zones: Mapping[str, str] | None = None) -> str:
    """The IANA time zone a delegate's times are shown in: its person's (``zones``, read once
    per page for the delegates it shows), UTC for a delegate without a person."""
    if zones is None or not isinstance(delegate_id, str):
        return DEFAULT_ZONE
    return zones.get(delegate_id, DEFAULT_ZONE)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo(DEFAULT_ZONE)


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def when(value: Any, zone: str = DEFAULT_ZONE) -> dict[str, str] | None:
    """A moment as the pages show it: date, time and the zone's abbreviation in ``zone`` (the
    delegate's), with the UTC moment for the hover title and the ISO form for ``<time>``. None
    for a missing or unreadable value (a stored row may hold anything)."""
    moment = _moment(value)
    if moment is None:
        return None
    try:
        local = moment.astimezone(_zone(zone))
        utc = moment.astimezone(UTC)
    except (OverflowError, ValueError):  # a year the zone's rules cannot reach
        return {"text": str(value), "utc": str(value), "iso": str(value)}
    return {
        "text": f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or zone}",
        "utc": f"{utc:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC",
        "iso": utc.isoformat(),
    }


# Entries that are internal context operations, not wake signals: the seed's "Inner Plane" label.
INNER_PLANE = {
    events.MEMORY_RETRIEVAL,
    events.CONTEXT_USAGE,
    events.CONTEXT_COMPACTED,
    events.CONTEXT_CAPSULE,
}
STATUS = {
    events.ACTIVATION_STARTED: "started",
    events.ACTIVATION_COMPLETED: "completed",
    events.ACTIVATION_FAILED: "failed",
    events.ACTIVATION_INTERRUPTED: "interrupted",
    events.TURN_RESUMED: "resumed",
}


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


# Which filter group each entry belongs to (the timeline's filter checkboxes).
GROUPS = {
    "user": "conversation",
    "assistant": "conversation",
    "tool": "conversation",
    "attached": "activity",
    "activity": "activity",
    "inner": "inner-plane",
}


def entry_view(item: TimelineEntry, zone: str = DEFAULT_ZONE) -> dict[str, Any]:
    """A timeline entry as the template draws it: its kind of bubble, its badge and title, the
    one-line summary, and the expandable parts (claimed batch, envelope, recalled memories,
    tool call or result, the raw detail)."""
    kind = item["type"]
    detail = item.get("detail") or {}
    label = str(item["label"])
    badge = None
    title = label
    if kind in INNER_PLANE or label.startswith("Inner Plane: "):
        badge, title = "Inner Plane", label.removeprefix("Inner Plane: ")
    if item["role"] == "user":
        category = "user"
    elif item["role"] == "assistant":
        category = "assistant"
    elif item["role"] == "tool":
        category = "tool"
    elif kind == events.CONTEXT_ATTACHED:
        category = "attached"
    elif kind in STATUS:
        category = "activity"
    else:
        category = "inner"
    signals = detail.get("signals")
    batch: list[Any] = signals if isinstance(signals, list) else []
    envelope = detail.get("envelope") if isinstance(detail.get("envelope"), str) else None
    memories = detail.get("memories") if kind == events.MEMORY_RETRIEVAL else None
    at = str(item.get("at") or "")
    return {
        "seq": item.get("seq"),
        "key": f"e{item.get('seq')}",
        "at": at,
        "when": when(at, zone),
        "type": kind,
        "category": category,
        "group": GROUPS.get(category, "inner-plane"),
        "quiet": False,
        "badge": badge,
        "title": title,
        "status": STATUS.get(kind),
        "summary": str(item.get("summary") or ""),
        "activation_id": item.get("activation_id"),
        "turn_id": item.get("turn_id"),
        "batch": [signal_view(s, zone) for s in batch if isinstance(s, dict)],
        "envelope": envelope,
        "memories": memories if isinstance(memories, list) else None,
        "raw": pretty(detail),
    }


def signal_view(signal: dict[str, Any], zone: str = DEFAULT_ZONE) -> dict[str, Any]:
    view = {**signal, "data_text": pretty(signal.get("data", {}))}
    view["created"] = when(signal.get("created_at"), zone)
    if isinstance(signal.get("events"), list):
        view["history"] = [
            {**e, "when": when(e.get("at"), zone)} for e in history(signal, signal["events"])
        ]
    return view


# --- quiet entries: what the plane did with signals outside the conversation -------------------

QUIET_TITLES = {
    "arrived": "{mode} signal arrived",
    "downgraded": "Interrupt downgraded to wake",
    "deferred": "Deferred",
    "retry_scheduled": "Backing off",
    "quarantined": "Quarantined",
    "loop_stopped": "Stopped by the loop guard",
    "expired": "Expired",
}
QUIET_GROUPS = {
    "arrived": "arrivals",
    "downgraded": "downgrades",
    "deferred": "deferrals",
    "retry_scheduled": "deferrals",
    "quarantined": "set-aside",
    "loop_stopped": "set-aside",
    "expired": "set-aside",
}


def quiet_view(item: dict[str, Any], zone: str = DEFAULT_ZONE) -> dict[str, Any]:
    """A quiet timeline entry (no conversation event behind it): a signal that arrived without
    starting anything, or a decision the plane took about one, with its reason once."""
    event = str(item.get("event"))
    mode = str(item.get("mode") or "")
    title = QUIET_TITLES.get(event, event).format(mode=mode.capitalize())
    if event == "downgraded" and item.get("requested_mode") != "interrupt":
        title = f"{str(item.get('requested_mode')).capitalize()} downgraded to {mode}"
    reason = str(item.get("reason") or "")
    if event == "deferred" and reason.startswith("token budget"):
        title = "Deferred: daily token budget spent"
    elif event == "deferred" and reason.startswith("quiet hours"):
        title = "Deferred: quiet hours"
    elif event == "deferred" and "budget" in reason:
        title = "Deferred: wake budget spent"
    at = item.get("at")
    return {
        "seq": None,
        "key": f"q-{event}-{item.get('id')}-{at}",
        "at": at,
        "when": when(at, zone),
        "type": f"signal.{event}",
        "category": "quiet",
        "group": QUIET_GROUPS.get(event, "set-aside"),
        "quiet": True,
        "badge": None,
        "title": title,
        "status": None,
        "summary": f"{item.get('kind')} from {item.get('source')}",
        "reason": str(item.get("reason") or ""),
        "signal_id": item.get("id"),
        "activation_id": item.get("activation_id"),
        "actor": item.get("actor"),
        "batch": [],
        "envelope": None,
        "memories": None,
        "raw": pretty(item),
    }


def merged(entries: list[dict[str, Any]], quiet: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conversation entries (in their append order) with the quiet ones placed by time."""
    out: list[dict[str, Any]] = []
    rest = sorted(quiet, key=lambda q: str(q["at"]))
    index = 0
    for entry in entries:
        at = str(entry["at"])
        while index < len(rest) and at and str(rest[index]["at"]) < at:
            out.append(rest[index])
            index += 1
        out.append(entry)
    out.extend(rest[index:])
    return out


# --- charts -----------------------------------------------------------------------------------

WIDTH, HEIGHT, PAD = 600.0, 160.0, 24.0
SERIES = 6  # kinds drawn with their own colour; the rest are "other"


@dataclass
class Chart:
    title: str
    # What a bar or a point is and what its height means, said under the title.
    explain: str = ""
    width: float = WIDTH
    height: float = HEIGHT
    bars: list[dict[str, Any]] = field(default_factory=list)
    line: str = ""
    legend: list[dict[str, Any]] = field(default_factory=list)
    max_label: str = ""
    first_label: str = ""
    last_label: str = ""
    empty: bool = True


def _minute(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(second=0, microsecond=0)


def _label(moment: datetime, zone: str) -> str:
    local = moment.astimezone(_zone(zone))
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or zone}"


def _span(chart: Chart, keys: list[datetime], zone: str) -> None:
    """Every chart spans the same minutes: from the start of the first to the end of the last
    (now), so the three end on the same minute."""
    chart.first_label = _label(keys[0], zone)
    chart.last_label = _label(keys[-1] + timedelta(minutes=1), zone)


def signals_chart(
    series: list[dict[str, Any]], minutes: list[str], zone: str = DEFAULT_ZONE
) -> Chart:
    """Stacked bars of signals created per minute, by kind."""
    chart = Chart(
        "Signals per minute by kind",
        "One bar per minute: the signals published in it, stacked by kind.",
    )
    if not minutes:
        return chart
    totals: dict[str, int] = defaultdict(int)
    for point in series:
        totals[point["kind"]] += point["count"]
    kinds = sorted(totals, key=lambda k: (-totals[k], k))
    shown = kinds[:SERIES]
    per_minute: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for point in series:
        kind = point["kind"] if point["kind"] in shown else "other"
        per_minute[_minute(point["minute"])][kind] += point["count"]
    keys = [_minute(m) for m in minutes]
    peak = max((sum(per_minute[m].values()) for m in keys), default=0)
    chart.empty = peak == 0
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    step = WIDTH / len(keys)
    order = [*shown, "other"]
    for index, minute in enumerate(keys):
        y = HEIGHT - PAD
        for kind in order:
            count = per_minute[minute].get(kind, 0)
            if not count:
                continue
            height = count * scale
            y -= height
            chart.bars.append(
                {
                    "x": round(index * step + 1, 1),
                    "y": round(y, 1),
                    "w": round(max(step - 2, 1), 1),
                    "h": round(height, 1),
                    "series": order.index(kind) if kind != "other" else SERIES,
                    "title": f"{_label(minute, zone)} {kind}: {count}",
                }
            )
    chart.legend = [
        {"series": i, "label": kind, "total": totals[kind]} for i, kind in enumerate(shown)
    ]
    if len(kinds) > SERIES:
        other = sum(totals[k] for k in kinds[SERIES:])
        chart.legend.append({"series": SERIES, "label": "other", "total": other})
    chart.max_label = f"busiest minute: {peak} signal{'s' if peak != 1 else ''}"
    _span(chart, keys, zone)
    return chart


def durations_chart(
    points: list[dict[str, Any]], minutes: list[str], zone: str = DEFAULT_ZONE
) -> Chart:
    """One bar per finished activation at its start time, as tall as it lasted."""
    chart = Chart(
        "Activation durations",
        "One bar per finished activation, placed at its start; its height is how long it ran "
        "(green completed, red failed, amber interrupted).",
    )
    if not minutes:
        return chart
    keys = [_minute(m) for m in minutes]
    begin, finish = keys[0], keys[-1] + timedelta(minutes=1)
    span = (finish - begin).total_seconds() or 1.0
    peak = max((p["duration_ms"] for p in points), default=0.0)
    chart.empty = not points
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    for point in points:
        started = datetime.fromisoformat(point["started_at"])
        x = (started - begin).total_seconds() / span * WIDTH
        height = max(point["duration_ms"] * scale, 1.0)
        chart.bars.append(
            {
                "x": round(min(max(x, 0.0), WIDTH - 3), 1),
                "y": round(HEIGHT - PAD - height, 1),
                "w": 3,
                "h": round(height, 1),
                "state": point["state"],
                "title": f"{_label(started, zone)} {point['trigger']} {point['state']}: "
                f"{point['duration_ms']:.0f} ms",
            }
        )
    chart.max_label = f"longest: {peak:.0f} ms"
    _span(chart, keys, zone)
    return chart


def depth_chart(points: list[dict[str, Any]], zone: str = DEFAULT_ZONE) -> Chart:
    """Pending (non-ambient) signals at the end of each minute; the last point is now."""
    chart = Chart(
        "Pending depth",
        "Signals waiting for delivery (not ambient) at the end of each minute; the last point "
        "is the pending count now, as the table above counts it.",
    )
    if not points:
        return chart
    peak = max(p["pending"] for p in points)
    chart.empty = False
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    step = WIDTH / len(points)
    # A minute's value is at its end: the first point at the end of the first minute, the last
    # at the right edge, where the other charts end too.
    chart.line = " ".join(
        f"{round((i + 1) * step, 1)},{round(HEIGHT - PAD - p['pending'] * scale, 1)}"
        for i, p in enumerate(points)
    )
    chart.max_label = f"peak: {peak} pending, now: {points[-1]['pending']}"
    _span(chart, [_minute(p["minute"]) for p in points], zone)
    return chart


def charts(series: dict[str, Any], zone: str = DEFAULT_ZONE) -> list[Chart]:
    minutes = [p["minute"] for p in series["pending_depth"]]
    return [
        signals_chart(series["signals_per_minute"], minutes, zone),
        durations_chart(series["activation_durations"], minutes, zone),
        depth_chart(series["pending_depth"], zone),
    ]


# --- pages: the dashboard's rows, the agent banner, dead letters, the signal page -------------

SIGNAL_STATES = ("pending", "claimed", "delivered", "dismissed", "expired", "dead")
NO_MODEL = "no model configured"


def age_words(seconds: float | None) -> str:
    if seconds is None:
        return "\u2013"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def overview_view(item: dict[str, Any], zones: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A dashboard row: the overview item with its times shown in the delegate's zone, and what
    is due next named (a timer by its name, or a delayed signal)."""
    zone = zone_of(item["delegate_id"], zones)
    timer = item.get("next_timer")
    next_due = item.get("next_due_at")
    if next_due is None:
        what = None
    elif timer is not None and timer.get("due_at") == next_due:
        what = {
            "kind": "timer",
            "name": timer.get("name"),
            "purpose": timer.get("purpose"),
            "id": timer.get("id"),
        }
    else:
        what = {"kind": "signal", "name": "a delayed or backing-off signal", "purpose": None}
    last = item.get("last_activation") or None
    return {
        **item,
        "zone": zone,
        "oldest_pending": age_words(item.get("oldest_pending_age_s")),
        "next_due": None if next_due is None else {"when": when(next_due, zone), **(what or {})},
        "last_started": None if last is None else when(last.get("started_at"), zone),
    }


def agent_notice(configured: str, recent_agents: list[Any]) -> dict[str, str] | None:
    """The banner of a plane that runs no model: this process's configured agent is the dry run,
    or the latest activations ran it (the activation worker's settings may differ)."""
    if configured != "dry-run" and "dry-run" not in recent_agents:
        return None
    return {
        "title": "Dry run: no model is configured",
        "text": "Each activation composes the context it would send, sends nothing, and dismisses "
        f"every signal it claimed with the reason “{NO_MODEL}”; the agent never replies. Set "
        "INNER_PLANE_OPENAI_MODEL (and OPENAI_API_KEY) for the activation worker to run a model.",
    }


def trace_link(found: dict[str, Any], template: str | None) -> dict[str, str | None] | None:
    """The activation's trace (tracing on: its invoke_agent span's trace id), with the URL the
    operator's template gives it (INNER_PLANE_TRACE_URL_TEMPLATE), if one is set."""
    trace_id = tracing.trace_id(found["activation"].pop("traceparent", None))
    if trace_id is None:
        return None
    return {"id": trace_id, "url": None if template is None else template.format(trace_id=trace_id)}


def activation_outcome(found: dict[str, Any]) -> str:
    """The activation's outcome in words, from its ThoughtFlow's dispositions."""
    from inner_plane.timeline import outcome_words

    flow = found.get("thoughtflow") or {}
    dispositions = flow.get("dispositions")
    if not isinstance(dispositions, dict):
        return ""
    counts: dict[str, int] = defaultdict(int)
    reasons: dict[str, set[str]] = defaultdict(set)
    for settled in dispositions.values():
        if isinstance(settled, dict):
            name = str(settled.get("disposition"))
            counts[name] += 1
            reasons[name].add(str(settled.get("reason") or ""))
    shared = {k: next(iter(v)) for k, v in reasons.items() if len(v) == 1}
    return outcome_words({"outcome": {"counts": dict(counts), "reasons": shared}})


def dead_letter_view(view: dict[str, Any]) -> dict[str, Any]:
    """Why a dead signal is dead, in words: quarantined (set aside at once, however many attempts
    it had left) or every attempt used."""
    attempts, most = view.get("attempts"), view.get("max_attempts")
    events_seen = {e.get("event") for e in view.get("events") or [] if isinstance(e, dict)}
    error = str(view.get("last_error") or "")
    if "quarantined" in events_seen or error.startswith("quarantined"):
        why = f"Quarantined after {attempts} of {most} attempts: the lane could not process it"
        view["dead_kind"] = "quarantined"
    elif isinstance(attempts, int) and isinstance(most, int) and attempts >= most:
        why = f"Used every attempt ({attempts} of {most})"
        view["dead_kind"] = "exhausted"
    else:
        why = f"Made dead after {attempts} of {most} attempts"
        view["dead_kind"] = "dead"
    view["why"] = why
    return view


def linked_activation_ids(signal: dict[str, Any]) -> list[Any]:
    """Every activation a signal's record names: its cause, its claim, its events."""
    import uuid

    named = [signal.get("caused_by"), signal.get("claimed_by")]
    named += [e.get("activation_id") for e in signal.get("events") or []]
    found = []
    for value in named:
        try:
            key = uuid.UUID(str(value))
        except ValueError:
            continue
        if key not in found:
            found.append(key)
    return found


HELD_BACK = {
    "deferred": "deferred",
    "retry_scheduled": "backing off after a failed attempt",
    "returned": "returned unread",
    "interrupted": "its activation was pre-empted",
}


def _held_back(signal: dict[str, Any], zone: str) -> str | None:
    """The policy or budget decision that holds the signal back (or held it), in words."""
    state, mode = signal.get("state"), signal.get("mode")
    requested = signal.get("requested_mode")
    said = []
    if requested and requested != mode:
        said.append(
            f"{requested} was requested; its kind's policy does not permit it, so it is {mode}."
        )
    if state == "pending" and mode == "ambient":
        said.append(
            "Ambient: retained and included only when relevant to later work; it never starts "
            "an activation."
        )
    elif state == "pending":
        later = _moment(signal.get("available_at"))
        decisions = [e for e in signal.get("events") or [] if e.get("event") in HELD_BACK]
        if later is not None and later > datetime.now(UTC):
            shown = (when(later, zone) or {}).get("text", "")
            if decisions:
                last = decisions[-1]
                said.append(
                    f"Held back until {shown}: {HELD_BACK[last['event']]}"
                    + (f" ({last['reason']})" if last.get("reason") else "")
                    + "."
                )
            else:
                said.append(f"Delayed by its publisher until {shown}.")
        else:
            said.append(
                f"Due now: it waits for the next activation of {signal.get('delegate_id')}."
            )
    elif state == "dead":
        said.append(str(signal.get("last_error") or "dead"))
    return " ".join(said) or None


def signal_page_view(
    signal: dict[str, Any], activations: dict[str, dict[str, Any]], zone: str
) -> dict[str, Any]:
    view = signal_view(signal, zone)
    for entry in view.get("history", []):
        entry["activation"] = activations.get(str(entry.get("activation_id")))
    claims = [e for e in view.get("history", []) if e.get("event") == "claimed"]
    taken = signal.get("claimed_by") or (claims[-1].get("activation_id") if claims else None)
    times = [
        (name, when(signal.get(key), zone))
        for name, key in (
            ("occurred", "occurred_at"), ("published", "created_at"),
            ("available", "available_at"), ("expires", "expires_at"),
            ("settled", "settled_at"), ("updated", "updated_at"),
        )
    ]  # fmt: skip
    return {
        "s": view,
        "zone": zone,
        "times": [(name, w) for name, w in times if w is not None],
        "taken_by": None if taken is None else {"id": taken, **activations.get(str(taken), {})},
        "taken_exists": taken is not None and str(taken) in activations,
        "caused_by": signal.get("caused_by"),
        "held_back": _held_back(signal, zone),
    }


def timer_named_by(signal: dict[str, Any]) -> str | None:
    """The timer a ``timer.due`` signal of the timers names (its ``data.timer``), if any."""
    data = signal.get("data")
    if signal.get("kind") != "timer.due" or signal.get("source") != "timers":
        return None
    name = data.get("timer") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else None
