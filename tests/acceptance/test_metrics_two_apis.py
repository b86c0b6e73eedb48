"""Two API processes scraped the way docs/operations.md says (every API pod a target, or one
Service target): the dashboard's queries give the true rate, not twice it. Every API process
reports the same plane-wide figures, so the queries take the max across replicas before any sum.
The dashboard's own expressions are evaluated by promtool on the real scrapes of both processes
(skips without promtool, except under CI=true)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from inner_plane import publish_many
from inner_plane.runtime import Runtime
from inner_plane.services import metrics
from inner_plane.services.embedded import free_port
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT, Stores
from tests.support.tools import require

pytestmark = pytest.mark.acceptance

DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-dashboard.json"
PUBLISHED = 60  # signals published between the two scrapes
# Scrapes every minute: the counters jump between the samples at 4 and 5 minutes; at 5 minutes
# a [5m] rate spans the samples 0 to 5 minutes, so the true rate there is PUBLISHED / 300 per
# second (what one API process alone gives; two must give the same, not twice it).
TRUE_RATE = PUBLISHED / 300


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return response.read().decode()


def series(scrapes: dict[str, tuple[str, str]]) -> list[dict[str, str]]:
    """promtool input series: each instance's sample before (0-4 min) and after (5-10 min)."""
    values: dict[str, list[float]] = {}
    for instance, (before, after) in scrapes.items():
        for phase, text in enumerate((before, after)):
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = {"job": "inner-plane-api", "instance": instance, **sample.labels}
                    selector = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    key = f"{sample.name}{{{selector}}}"
                    values.setdefault(key, [float("nan"), float("nan")])[phase] = sample.value
    return [
        {"series": key, "values": f"{before}x4 {after}x5"}
        for key, (before, after) in values.items()
        if before == before and after == after  # present in both scrapes
    ]


def published(text: str) -> dict[str, float]:
    """The published counter of one scrape, per namespace (summed over sources)."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "inner_plane_signals_published_total":
                namespace = sample.labels["namespace"]
                totals[namespace] = totals.get(namespace, 0.0) + sample.value
    return totals


def panel(title_start: str) -> str:
    for entry in json.loads(DASHBOARD.read_text())["panels"]:
        if entry["title"].startswith(title_start):
            return str(entry["targets"][0]["expr"])
    raise AssertionError(title_start)


def test_the_dashboard_gives_the_true_rate_with_two_api_processes(
    stores: Stores, runtime: Runtime, tmp_path: Path, children: list[ChildProcess]
) -> None:
    promtool = require("promtool", "prometheus")
    ports = [free_port(), free_port()]
    apis = [
        ChildProcess(
            f"api-{n}",
            [sys.executable, "-m", "inner_plane", "serve"],
            stores.env(INNER_PLANE_API_PORT=str(port)),
            tmp_path,
        ).start()
        for n, port in enumerate(ports)
    ]
    children.extend(apis)
    for api in apis:
        api.wait_for("Uvicorn running", timeout=120)

    # One signal first: its series exist in both scrapes (as they would on a running plane).
    publish_many(
        [{"kind": "task.completed", "source": "ci", "dedup_key": "first"}], runtime=runtime
    )
    metrics.flush()
    before = {f"api-{n}:8700": scrape(port) for n, port in enumerate(ports)}
    publish_many(
        [
            {"kind": "task.completed", "source": "ci", "dedup_key": f"r-{i}"}
            for i in range(PUBLISHED)
        ],
        runtime=runtime,
    )
    metrics.flush()  # this process's increments reach the shared counters now
    after = {f"api-{n}:8700": scrape(port) for n, port in enumerate(ports)}
    assert after["api-0:8700"].count("inner_plane_signals_published_total") > 0
    # The running API's scrape passes promtool's metric lint as it is served.
    linted = subprocess.run(
        [promtool, "check", "metrics"],
        input=after["api-0:8700"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert linted.returncode == 0, linted.stdout + linted.stderr

    scrapes: dict[str, tuple[str, str]] = {k: (before[k], after[k]) for k in before}
    # The counters are the plane's (shared through Redis): a namespace another process of this
    # test worker counted before this test began is in both scrapes too, at its own true rate
    # (zero unless it moved), and the panel must give that once as well.
    then, now = published(before["api-0:8700"]), published(after["api-0:8700"])
    assert now["task"] - then["task"] == PUBLISHED
    true_rates = {ns: (now[ns] - then.get(ns, 0.0)) / 300 for ns in now if ns in then}
    tests: dict[str, Any] = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series(scrapes),
                "promql_expr_test": [
                    {
                        "expr": panel("Signals published"),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": '{namespace="task"}', "value": TRUE_RATE}]
                        + [
                            {"labels": f'{{namespace="{ns}"}}', "value": rate}
                            for ns, rate in sorted(true_rates.items())
                            if ns != "task"
                        ],
                    },
                    {
                        "expr": panel("Signals by state"),
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                "labels": f'{{job="inner-plane-api", state="{state}"}}',
                                "value": PUBLISHED + 1 if state in {"pending", "due"} else 0,
                            }
                            for state in ("claimed", "dead", "due", "pending")
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "dashboard_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
