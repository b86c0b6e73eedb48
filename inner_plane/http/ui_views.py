"""What the UI's templates show, computed from the read API's data: timeline entries with the
parts an operator expands, and chart geometry (inline SVG, drawn on the server: no chart
library, nothing fetched by the browser). Pure functions."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from inner_plane.journal.conversation import events
from inner_plane.timeline import TimelineEntry

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


def entry_view(item: TimelineEntry) -> dict[str, Any]:
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
        "at": at,
        "time": at[11:19] if len(at) >= 19 else "live",
        "type": kind,
        "category": category,
        "badge": badge,
        "title": title,
        "status": STATUS.get(kind),
        "summary": str(item.get("summary") or ""),
        "activation_id": item.get("activation_id"),
        "batch": [signal_view(s) for s in batch if isinstance(s, dict)],
        "envelope": envelope,
        "memories": memories if isinstance(memories, list) else None,
        "raw": pretty(detail),
    }


def signal_view(signal: dict[str, Any]) -> dict[str, Any]:
    return {**signal, "data_text": pretty(signal.get("data", {}))}


# --- charts -----------------------------------------------------------------------------------

WIDTH, HEIGHT, PAD = 600.0, 160.0, 24.0
SERIES = 6  # kinds drawn with their own colour; the rest are "other"


@dataclass
class Chart:
    title: str
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


def signals_chart(series: list[dict[str, Any]], minutes: list[str]) -> Chart:
    """Stacked bars of signals created per minute, by kind."""
    chart = Chart("Signals per minute by kind")
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
                    "title": f"{minute:%H:%M} {kind}: {count}",
                }
            )
    chart.legend = [
        {"series": i, "label": kind, "total": totals[kind]} for i, kind in enumerate(shown)
    ]
    if len(kinds) > SERIES:
        other = sum(totals[k] for k in kinds[SERIES:])
        chart.legend.append({"series": SERIES, "label": "other", "total": other})
    chart.max_label = f"{peak}/min"
    chart.first_label, chart.last_label = f"{keys[0]:%H:%M}", f"{keys[-1]:%H:%M}"
    return chart


def durations_chart(points: list[dict[str, Any]], start: str, end: str) -> Chart:
    """One bar per finished activation at its start time, as tall as it lasted."""
    chart = Chart("Activation durations")
    begin, finish = _minute(start), _minute(end) + timedelta(minutes=1)
    span = (finish - begin).total_seconds() or 1.0
    peak = max((p["duration_ms"] for p in points), default=0.0)
    chart.empty = not points
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    for point in points:
        x = (datetime.fromisoformat(point["started_at"]) - begin).total_seconds() / span * WIDTH
        height = max(point["duration_ms"] * scale, 1.0)
        chart.bars.append(
            {
                "x": round(min(max(x, 0.0), WIDTH - 3), 1),
                "y": round(HEIGHT - PAD - height, 1),
                "w": 3,
                "h": round(height, 1),
                "state": point["state"],
                "title": f"{point['trigger']} {point['state']}: {point['duration_ms']:.0f} ms",
            }
        )
    chart.max_label = f"{peak:.0f} ms"
    chart.first_label, chart.last_label = f"{begin:%H:%M}", f"{finish:%H:%M}"
    return chart


def depth_chart(points: list[dict[str, Any]]) -> Chart:
    """Pending (non-ambient) signals at the end of each minute."""
    chart = Chart("Pending depth")
    if not points:
        return chart
    peak = max(p["pending"] for p in points)
    chart.empty = False
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    step = WIDTH / max(len(points) - 1, 1)
    chart.line = " ".join(
        f"{round(i * step, 1)},{round(HEIGHT - PAD - p['pending'] * scale, 1)}"
        for i, p in enumerate(points)
    )
    chart.max_label = f"{peak} pending"
    first, last = _minute(points[0]["minute"]), _minute(points[-1]["minute"])
    chart.first_label, chart.last_label = f"{first:%H:%M}", f"{last:%H:%M}"
    return chart


def charts(series: dict[str, Any]) -> list[Chart]:
    minutes = [p["minute"] for p in series["pending_depth"]]
    return [
        signals_chart(series["signals_per_minute"], minutes),
        durations_chart(series["activation_durations"], minutes[0], minutes[-1])
        if minutes
        else Chart("Activation durations"),
        depth_chart(series["pending_depth"]),
    ]
