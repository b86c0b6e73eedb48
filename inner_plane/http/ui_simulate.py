"""The simulator's page: the recorded history against a candidate policy (a stored version),
drawn server-side as the dashboard's charts: the delay distributions and the activations per
hour, side by side (series 0: recorded, series 1: candidate)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from inner_plane.attention.document import SettingsDefaults
from inner_plane.attention.live import stored_policy
from inner_plane.attention.versions import in_force
from inner_plane.http.ui_views import HEIGHT, PAD, WIDTH, Chart
from inner_plane.journal import policy as journal_policy
from inner_plane.runtime import Runtime
from inner_plane.simulator.replay import simulate
from inner_plane.sources import errors

LEGEND = ("recorded", "candidate")


def paired_chart(title: str, labels: list[str], pairs: list[tuple[int, int]], unit: str) -> Chart:
    """Two bars per label: recorded (series 0) and candidate (series 1)."""
    chart = Chart(title)
    peak = max((max(a, b) for a, b in pairs), default=0)
    chart.empty = peak == 0
    if not labels:
        return chart
    slot = WIDTH / len(labels)
    width = max(slot / 2 - 1, 1.0)
    scale = (HEIGHT - PAD) / peak if peak else 0.0
    for index, (label, values) in enumerate(zip(labels, pairs, strict=True)):
        for series, value in enumerate(values):
            height = value * scale
            chart.bars.append(
                {
                    "x": round(index * slot + series * width, 1),
                    "y": round(HEIGHT - PAD - height, 1),
                    "w": round(width, 1),
                    "h": round(height, 1),
                    "series": series,
                    "title": f"{label}: {LEGEND[series]} {value} {unit}",
                }
            )
    chart.legend = [
        {"series": 0, "label": "recorded", "total": sum(a for a, _ in pairs)},
        {"series": 1, "label": "candidate", "total": sum(b for _, b in pairs)},
    ]
    chart.max_label = f"{peak} {unit}"
    chart.first_label, chart.last_label = labels[0], labels[-1]
    return chart


def charts(report: dict[str, Any]) -> list[Chart]:
    before = report["recorded"]["delay_s"]["distribution"]
    after = report["candidate"]["delay_s"]["distribution"]
    labels = [f"<= {b['le']} s" if b["le"] is not None else "more" for b in before]
    delays = paired_chart(
        "Delay from publish to activation",
        labels,
        [(a["count"], b["count"]) for a, b in zip(before, after, strict=True)],
        "signals",
    )
    hours_before = report["recorded"]["activations"]["per_hour"]
    hours_after = report["candidate"]["activations"]["per_hour"]
    hours = sorted(set(hours_before) | set(hours_after))
    per_hour = paired_chart(
        "Activations per hour (UTC)",
        [h[11:16] for h in hours],
        [(hours_before.get(h, 0), hours_after.get(h, 0)) for h in hours],
        "activations",
    )
    return [delays, per_hour]


def simulate_page(
    rt: Runtime,
    since: str | None,
    until: str | None,
    delegate: str | None,
    version: int | None,
) -> dict[str, Any]:
    """The page's context: the report of a candidate (a stored version, default the one in
    force) over [since, until) (default: the last 24 hours)."""
    end = _instant("until", until) or datetime.now(UTC)
    start = _instant("since", since) or end - timedelta(hours=24)
    if end <= start:
        raise errors.invalid("until", "must be after since")
    if version is None:
        policy = in_force(rt)
        document, label = (
            policy.document,
            ("settings" if policy.version is None else f"v{policy.version} (in force)"),
        )
    else:
        stored = journal_policy.get(rt.engine, version)
        if stored is None:
            raise errors.invalid("version", f"no policy version {version}")
        base = SettingsDefaults.of(rt.settings)
        document = stored_policy(stored.document, version, base).document
        label = f"v{version}"
    report = simulate(
        rt.engine, rt.registry, rt.settings, document, start, end, delegate, label=label,
    )  # fmt: skip
    return {
        "report": report,
        "charts": charts(report),
        "since": start.isoformat(),
        "until": end.isoformat(),
        "delegate": delegate or "",
        "version": "" if version is None else version,
        "label": label,
    }


def _instant(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise errors.invalid(name, "not an ISO-8601 instant") from None
    if moment.tzinfo is None:
        raise errors.invalid(name, "give the offset (e.g. Z or +00:00)")
    return moment
