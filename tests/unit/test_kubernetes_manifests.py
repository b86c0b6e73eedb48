"""deploy/kubernetes: the base and the example overlay, validated offline.

Both are rendered in Python (tests/support/kustomize.py; cross-checked against `kubectl
kustomize` where kubectl is installed) and every object is validated against the Kubernetes
JSON schemas bundled with `kubernetes-validate`. Every container command and probe is parsed by
the CLI's own parser, every environment variable is a real setting, and the processes are the
ones `inner-plane up` runs.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from inner_plane.config import build_settings
from tests.support.deployment import is_setting, resolve, up_commands
from tests.support.kustomize import Resource, containers, pod_spec, render

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAY = KUBERNETES / "overlays" / "example"
# The oldest Kubernetes release the manifests promise to work on (autoscaling/v2, policy/v1).
KUBERNETES_VERSION = "1.29"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


@pytest.fixture(scope="module")
def base() -> list[Resource]:
    return render(BASE)


@pytest.fixture(scope="module")
def overlay() -> list[Resource]:
    return render(OVERLAY)


def by_kind(resources: list[Resource], kind: str) -> dict[str, Resource]:
    return {r["metadata"]["name"]: r for r in resources if r["kind"] == kind}


def workloads(resources: list[Resource]) -> dict[str, Resource]:
    return {r["metadata"]["name"]: r for r in resources if pod_spec(r) is not None}


def component(resource: Resource) -> str:
    return str(resource["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_every_object_validates_against_the_kubernetes_schemas(directory: Path) -> None:
    resources = render(directory)
    assert len(resources) >= 20
    for resource in resources:
        try:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            name = f"{resource['kind']}/{resource['metadata']['name']}"
            raise AssertionError(f"{directory.name}: {name}: {error.message}") from None


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_the_python_rendering_is_what_kubectl_kustomize_renders(directory: Path) -> None:
    completed = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr

    def keyed(resources: list[Resource]) -> dict[tuple[str, str], Resource]:
        return {(r["kind"], r["metadata"]["name"]): r for r in resources}

    theirs = keyed([d for d in yaml.safe_load_all(completed.stdout) if d])
    ours = keyed(render(directory))
    assert set(ours) == set(theirs)
    for key, resource in ours.items():
        if key[0] == "Secret":  # kubectl may wrap long base64 values; compare the values
            assert {k: base64.b64decode(v) for k, v in resource["data"].items()} == {
                k: base64.b64decode(v) for k, v in theirs[key]["data"].items()
            }
            continue
        assert resource == theirs[key], key


def test_every_container_and_probe_runs_a_real_cli_command(overlay: list[Resource]) -> None:
    checked = 0
    for container in containers(overlay):
        assert container["command"][0] == "inner-plane", container["name"]
        resolve(container["command"])
        for probe in PROBES:
            if probe in container:
                resolve(container[probe]["exec"]["command"])
                checked += 1
    assert checked == 3 * 7


def test_the_plane_runs_every_process_that_up_runs(overlay: list[Resource]) -> None:
    commands = [c["command"] for c in containers(overlay)]
    for wanted in [
        *up_commands(),
        ["inner-plane", "db", "upgrade"],
        ["inner-plane", "worker", "user_turns"],
    ]:
        assert any(command[: len(wanted)] == wanted for command in commands), (
            f"`{' '.join(wanted)}` is not run by deploy/kubernetes"
        )


def test_every_environment_variable_is_a_real_setting_and_valid(
    overlay: list[Resource], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = by_kind(overlay, "ConfigMap")["inner-plane-config"]["data"]
    secret = by_kind(overlay, "Secret")["inner-plane-secrets"]["data"]
    values = {**config, **{k: base64.b64decode(v).decode() for k, v in secret.items()}}
    for container in containers(overlay):
        for variable in container.get("env", []):
            values.setdefault(variable["name"], variable.get("value", ""))
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == "inner-plane-secrets" and ref["key"] in secret
    unknown = sorted(name for name in values if not is_setting(name))
    assert not unknown, f"not settings of inner_plane/config.py: {unknown}"
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings = build_settings()  # raises ConfigError naming any invalid value
    assert settings.database_url and settings.redis_url and settings.broker_url
    assert settings.timers_file is not None


def test_credentials_live_in_the_secret_only(base: list[Resource]) -> None:
    config = by_kind(base, "ConfigMap")["inner-plane-config"]["data"]
    for name in config:
        assert not name.endswith(("_URL", "_KEY", "_SECRET", "_PASSWORD", "_TOKEN")), name
    assert "Secret" not in {r["kind"] for r in base}, "the overlay supplies the Secret"
    for name, workload in workloads(base).items():
        for container in pod_spec(workload)["containers"]:  # type: ignore[index]
            sources = [next(iter(s.values()))["name"] for s in container["envFrom"]]
            assert sources == ["inner-plane-config", "inner-plane-secrets"], name
            for variable in container.get("env", []):
                assert "value" not in variable, f"{name}: {variable['name']} set in clear"


def test_every_pod_has_probes_resources_and_a_disruption_budget(base: list[Resource]) -> None:
    budgets = by_kind(base, "PodDisruptionBudget")
    deployments = by_kind(base, "Deployment")
    assert len(deployments) == 7
    for name, deployment in deployments.items():
        [container] = pod_spec(deployment)["containers"]  # type: ignore[index]
        for probe in PROBES:
            assert container[probe]["exec"]["command"][:2] == ["inner-plane", "health"], name
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), name
        [budget] = [
            b
            for b in budgets.values()
            if b["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        ]
        assert "minAvailable" in budget["spec"] or budget["spec"]["maxUnavailable"] >= 1, name
        assert (
            deployment["spec"]["template"]["metadata"]["labels"]
            == (deployment["spec"]["selector"]["matchLabels"])
        )
    job = by_kind(base, "Job")["inner-plane-migrate"]
    [migrate] = pod_spec(job)["containers"]  # type: ignore[index]
    assert migrate["command"] == ["inner-plane", "db", "upgrade"]


def test_worker_probes_check_their_own_queue(base: list[Resource]) -> None:
    for deployment in by_kind(base, "Deployment").values():
        [container] = pod_spec(deployment)["containers"]  # type: ignore[index]
        command = container["command"]
        if command[1] != "worker":
            continue
        role = command[2]
        for probe in PROBES:
            probe_command = container[probe]["exec"]["command"]
            assert probe_command[2:6] == ["worker", role, "--queue", role], probe_command


def test_workers_outlast_a_running_task_on_shutdown(base: list[Resource]) -> None:
    limit = build_settings().task_time_limit_s
    for name, deployment in by_kind(base, "Deployment").items():
        if "worker" in name:
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            assert grace > limit, name


def test_exactly_one_beat_recreated_never_rolled(overlay: list[Resource]) -> None:
    beats = [
        d
        for d in by_kind(overlay, "Deployment").values()
        if d["spec"]["template"]["spec"]["containers"][0]["command"] == ["inner-plane", "beat"]
    ]
    assert len(beats) == 1
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(
        h["spec"]["scaleTargetRef"]["name"] == beats[0]["metadata"]["name"]
        for h in by_kind(overlay, "HorizontalPodAutoscaler").values()
    )


def test_signals_workers_scale_with_an_hpa_and_activation_workers_run_one_at_a_time(
    overlay: list[Resource],
) -> None:
    deployments = by_kind(overlay, "Deployment")
    [hpa] = by_kind(overlay, "HorizontalPodAutoscaler").values()
    target = deployments[hpa["spec"]["scaleTargetRef"]["name"]]
    assert target["spec"]["template"]["spec"]["containers"][0]["command"][1:3] == [
        "worker",
        "signals",
    ]
    assert "replicas" not in target["spec"], "the HPA owns the signals worker's replicas"
    assert (
        hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    )
    for name in ("inner-plane-activation-worker", "inner-plane-user-turns-worker"):
        command = deployments[name]["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[-2:] == ["--concurrency", "1"], name
    assert deployments["inner-plane-activation-worker"]["spec"]["replicas"] == 4  # the overlay


def test_flower_is_internal_and_everything_else_admits_nothing(base: list[Resource]) -> None:
    services = by_kind(base, "Service")
    assert set(services) == {"inner-plane-api", "inner-plane-flower"}
    for service in services.values():
        assert service["spec"]["type"] == "ClusterIP"
    policies = by_kind(base, "NetworkPolicy")
    deny = policies["inner-plane-default-deny-ingress"]["spec"]
    assert deny["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "inner-plane"}
    assert deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    admitted: dict[str, Any] = {}
    for policy in policies.values():
        labels = policy["spec"]["podSelector"]["matchLabels"]
        if "app.kubernetes.io/component" in labels:
            admitted[labels["app.kubernetes.io/component"]] = policy["spec"]["ingress"]
    assert set(admitted) == {"api", "flower"}
    [flower_rule] = admitted["flower"]
    # Labelled pods of its namespace, and a labelled monitoring namespace (Prometheus), only.
    assert flower_rule["from"] == [
        {"podSelector": {"matchLabels": {"inner-plane.dev/flower-access": "true"}}},
        {"namespaceSelector": {"matchLabels": {"inner-plane.dev/monitoring": "true"}}},
    ]
    assert flower_rule["ports"] == [{"protocol": "TCP", "port": 5555}]


def test_liveness_checks_the_process_and_readiness_the_stores(base: list[Resource]) -> None:
    """A PostgreSQL, Redis or broker outage must not restart every pod: liveness probes
    never fail for a store (`--live`, or Flower's own /healthcheck); readiness probes do."""
    checked = 0
    for container in containers(base):
        if "livenessProbe" not in container:  # the migration Job
            continue
        live = container["livenessProbe"]["exec"]["command"]
        ready = container["readinessProbe"]["exec"]["command"]
        assert live[:2] == ["inner-plane", "health"] and ready[:2] == live[:2], container["name"]
        if live[2] == "flower":  # Flower's /healthcheck asks no store
            assert "--live" not in live
            continue
        assert "--live" in live and "--live" not in ready, container["name"]
        assert [w for w in live if w != "--live"] == ready, container["name"]
        checked += 1
    assert checked == 6  # api, beat, four workers


def test_kubernetes_validate_refuses_a_manifest_with_an_unknown_field(
    base: list[Resource],
) -> None:
    """The schema check above is seen to fail: a planted unknown field (a typo of
    readinessProbe) is refused in strict mode."""
    import copy

    api = copy.deepcopy(workloads(base)["inner-plane-api"])
    container = api["spec"]["template"]["spec"]["containers"][0]
    container["readynessProbe"] = container["readinessProbe"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(api, KUBERNETES_VERSION, strict=True)


def test_the_timers_file_is_mounted_not_baked(overlay: list[Resource]) -> None:
    config = by_kind(overlay, "ConfigMap")
    path = Path(config["inner-plane-config"]["data"]["INNER_PLANE_TIMERS_FILE"])
    assert path.name in config["inner-plane-timers"]["data"]
    for name, workload in by_kind(overlay, "Deployment").items():
        spec = pod_spec(workload)
        assert spec is not None
        volumes = {v["name"]: v for v in spec["volumes"]}
        [container] = spec["containers"]
        mounts = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent]
        assert mounts and mounts[0]["readOnly"], name
        assert volumes[mounts[0]["name"]]["configMap"]["name"] == "inner-plane-timers", name
