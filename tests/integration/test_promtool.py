"""deploy/monitoring/alerts.yml and /metrics, checked by Prometheus' own promtool (Debian's
`prometheus` package): `check rules`, `test rules` (tests/promtool/alerts_test.yml), the
stuck-lane rule evaluated on the plane's own scrapes, and `check metrics` on a scrape. Each check
is also seen failing on a planted defect."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from inner_plane.http.app import create_app
from inner_plane.runtime import Runtime
from tests.integration.test_stuck_lane import _publish_waiting
from tests.support.stores import ROOT
from tests.support.tools import require

ALERTS = ROOT / "deploy" / "monitoring" / "alerts.yml"
RULE_TESTS = ROOT / "tests" / "promtool" / "alerts_test.yml"


@pytest.fixture
def promtool() -> str:
    return require("promtool", "prometheus")


def run(promtool: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_check_rules_passes_and_catches_a_typo(promtool: str, tmp_path: Path) -> None:
    done = run(promtool, "check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    planted = tmp_path / "alerts.yml"
    planted.write_text(ALERTS.read_text().replace("max by (delegate) (", "max by (delegate (", 1))
    done = run(promtool, "check", "rules", str(planted))
    assert done.returncode != 0 and "parse error" in done.stdout + done.stderr


def _rule_tests_against(rules: Path, tmp_path: Path) -> Path:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = [str(rules)]
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return path


def test_rule_unit_tests_pass_and_catch_a_changed_rule(promtool: str, tmp_path: Path) -> None:
    done = run(promtool, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    # A stuck-lane rule that pages after 1 minute instead of 5 fails the unit tests.
    rules = yaml.safe_load(ALERTS.read_text())
    for rule in rules["groups"][0]["rules"]:
        if rule.get("alert") == "InnerPlaneLaneStuck":
            rule["for"] = "1m"
    planted = tmp_path / "alerts.yml"
    planted.write_text(yaml.safe_dump(rules))
    done = run(promtool, "test", "rules", str(_rule_tests_against(planted, tmp_path)))
    assert done.returncode != 0 and "InnerPlaneLaneStuck" in done.stdout + done.stderr


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def _series_of(scrape: str) -> list[dict[str, str]]:
    """The scrape as promtool input series, constant over the test's 30 minutes."""
    series = [{"series": 'up{job="inner-plane-api", instance="api:8700"}', "values": "1x30"}]
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            labels = {"job": "inner-plane-api", "instance": "api:8700", **sample.labels}
            selector = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            values = f"{sample.value}x30"
            series.append({"series": f"{sample.name}{{{selector}}}", "values": values})
    return series


def _stuck_alerts_on(promtool: str, scrape: str, expected: list[str], tmp_path: Path) -> None:
    annotations = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"][0]["annotations"]
    assert yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"][0]["alert"] == (
        "InnerPlaneLaneStuck"
    )
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series_of(scrape),
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "InnerPlaneLaneStuck",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "page", "delegate": delegate},
                                "exp_annotations": {
                                    key: value.replace("{{ $labels.delegate }}", delegate)
                                    for key, value in annotations.items()
                                },
                            }
                            for delegate in expected
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "scraped_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = run(promtool, "test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_stuck_rule_on_the_planes_own_scrapes(
    promtool: str, runtime: Runtime, client: TestClient, tmp_path: Path
) -> None:
    # Only next-turn work, 30 minutes old: never a page.
    _publish_waiting(runtime, "quiet", "next-turn", minutes=30)
    _stuck_alerts_on(promtool, client.get("/metrics").text, [], tmp_path)
    # A due wake, 10 minutes old, with no activation: the page names that lane only.
    _publish_waiting(runtime, "woken", "wake", minutes=10)
    _stuck_alerts_on(promtool, client.get("/metrics").text, ["woken"], tmp_path)


def test_check_metrics_on_a_scrape_and_a_planted_defect(
    promtool: str, runtime: Runtime, client: TestClient
) -> None:
    _publish_waiting(runtime, "d-1", "wake", minutes=1)
    scrape = client.get("/metrics").text
    done = run(promtool, "check", "metrics", stdin=scrape)
    assert done.returncode == 0, done.stdout + done.stderr
    planted = scrape + "# HELP inner_plane_planted A counter without its suffix\n"
    planted += "# TYPE inner_plane_planted counter\ninner_plane_planted 1\n"
    done = run(promtool, "check", "metrics", stdin=planted)
    assert done.returncode != 0 and '"_total" suffix' in done.stdout + done.stderr
