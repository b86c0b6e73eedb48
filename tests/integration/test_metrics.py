"""``GET /metrics``: Prometheus' own parser reads it; counters move with a publication (kept in
Redis, so any API process reports the same); the series stay bounded with 10k delegates."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from inner_plane import publish_many
from inner_plane.http.app import create_app
from inner_plane.runtime import Runtime
from inner_plane.services import metrics


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def scrape(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(v for found, v in samples.get(name, []) if labels.items() <= found.items())


def test_counters_move_with_a_publication(client: TestClient, runtime: Runtime) -> None:
    before = scrape(client)
    assert value(before, "inner_plane_store_up", store="postgresql") == 1
    assert value(before, "inner_plane_store_up", store="redis") == 1
    published = value(before, "inner_plane_signals_published_total", namespace="task")

    signal = {"kind": "task.completed", "source": "ci", "dedup_key": "m-1", "mode": "wake"}
    publish_many([signal, signal], runtime=runtime)  # the second is a duplicate
    after = scrape(client)
    assert (
        value(after, "inner_plane_signals_published_total", namespace="task", source="ci")
        == published + 1
    )
    assert value(after, "inner_plane_signals_deduplicated_total", namespace="task") >= 1
    assert value(after, "inner_plane_signals", state="pending") == 1
    assert value(after, "inner_plane_lane_due_signals", delegate="default") == 1
    # Histograms are present with their buckets, whatever has been observed so far.
    assert "inner_plane_activation_duration_seconds_bucket" in after
    assert "inner_plane_wake_latency_seconds_count" in after


def test_series_stay_bounded_with_ten_thousand_delegates(
    client: TestClient, runtime: Runtime
) -> None:
    for start in range(0, 10_000, 1_000):
        publish_many(
            [
                {"kind": "task.completed", "source": f"src-{i % 200}", "delegate_id": f"d-{i}"}
                for i in range(start, start + 1_000)
            ],
            runtime=runtime,
        )
    samples = scrape(client)
    assert value(samples, "inner_plane_signals", state="pending") == 10_000
    assert value(samples, "inner_plane_lanes_with_due_work") > metrics.TOP_DELEGATES
    assert len(samples["inner_plane_lane_due_signals"]) == metrics.TOP_DELEGATES
    # 200 sources, counted under at most MAX_SOURCES labels (the rest as "other").
    sources = {labels["source"] for labels, _ in samples["inner_plane_signals_published_total"]}
    assert len(sources) <= metrics.MAX_SOURCES + 1 and "other" in sources
    assert sum(len(series) for series in samples.values()) < 400


def test_alert_rules_and_dashboard_use_only_exposed_metrics(client: TestClient) -> None:
    import json
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
    exprs = [
        rule["expr"]
        for group in yaml.safe_load((root / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    ]
    dashboard = json.loads((root / "grafana-dashboard.json").read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\binner_plane_[a-z_]+", expr)}
    # Every family /metrics declares (an empty one too), with a histogram's series names.
    types = re.findall(r"^# TYPE (\S+) ", client.get("/metrics").text, re.MULTILINE)
    exposed = {f"{name}{suffix}" for name in types for suffix in ("", "_bucket", "_sum", "_count")}
    assert used and used <= exposed, used - exposed


def test_processor_sources_count_as_themselves_and_namespaces_stay_known(
    client: TestClient, runtime: Runtime
) -> None:
    import contextlib

    from inner_plane import SignalError

    publish_many(
        [{"kind": "external.ci.finished", "source": "external.ci", "dedup_key": "run-1"}],
        runtime=runtime,
    )
    # Kinds nobody registered, accepted or refused, never mint a namespace label of their own.
    publish_many([{"kind": "cardtest.one", "source": "copilot"}], runtime=runtime)
    for kind in ("cardtest-three", "cardtest.four", 7):
        with contextlib.suppress(SignalError):
            publish_many([{"kind": kind, "source": "external.ci", "mode": "loud"}], runtime=runtime)
    samples = scrape(client)
    published = samples["inner_plane_signals_published_total"]
    assert value(samples, "inner_plane_signals_published_total", source="external.ci") == 1
    assert ({"namespace": "external", "source": "external.ci"}, 1.0) in published
    assert ({"namespace": "other", "source": "copilot"}, 1.0) in published
    rejected = samples["inner_plane_signals_rejected_total"]
    assert {labels["namespace"] for labels, _ in rejected} == {"other"}
    assert value(samples, "inner_plane_signals_rejected_total", source="external.ci") == 3
    every = {
        labels.get(name)
        for series in samples.values()
        for labels, _ in series
        for name in ("namespace", "source")
    }
    assert "invalid" not in every and not {"cardtest", "cardtest-three"} & every
