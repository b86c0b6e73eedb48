"""Render a kustomization in Python: the subset of kustomize that deploy/kubernetes uses.

Supported: ``resources`` (files and directories), ``namespace``, ``labels`` (metadata only),
``images``, ``secretGenerator`` / ``configMapGenerator`` (``envs``, ``files``, ``literals``,
``behavior``) with ``disableNameSuffixHash``, and ``patches`` given by ``path`` (strategic merge:
maps merge, lists of named items merge by name, anything else is replaced). Anything else is
refused, so the manifests cannot quietly outgrow what the tests check. Where ``kubectl`` is
installed the tests compare this rendering with ``kubectl kustomize``.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

SUPPORTED = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "labels",
    "images",
    "generatorOptions",
    "secretGenerator",
    "configMapGenerator",
    "patches",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}


class KustomizeError(Exception):
    pass


def load_documents(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: Path) -> list[Resource]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        resources.extend(render(target) if target.is_dir() else load_documents(target))

    for pairs in kustomization.get("labels", []):
        if pairs.get("includeSelectors") or pairs.get("includeTemplates"):
            raise KustomizeError("labels: only metadata labels are supported")
        for resource in resources:
            resource.setdefault("metadata", {}).setdefault("labels", {}).update(pairs["pairs"])

    hashed = not kustomization.get("generatorOptions", {}).get("disableNameSuffixHash")
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for generator in kustomization.get(key, []):
            if hashed:
                raise KustomizeError("generators need disableNameSuffixHash: true")
            _generate(directory, kind, generator, resources)

    for patch in kustomization.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"patches: only `path` patches are supported, not {patch}")
        for document in load_documents(directory / patch["path"]):
            target = _find(resources, document["kind"], document["metadata"]["name"])
            if target is None:
                raise KustomizeError(f"patch {patch['path']}: no {document['kind']} to patch")
            _merge(target, document)

    for image in kustomization.get("images", []):
        for container in containers(resources):
            if container.get("image", "").split(":")[0] == image["name"]:
                name = image.get("newName", image["name"])
                container["image"] = f"{name}:{image['newTag']}" if "newTag" in image else name

    if "namespace" in kustomization:
        for resource in resources:
            if resource["kind"] not in CLUSTER_SCOPED:
                resource["metadata"]["namespace"] = kustomization["namespace"]
    return resources


def containers(resources: list[Resource]) -> list[dict[str, Any]]:
    """Every container and init container of every workload."""
    found: list[dict[str, Any]] = []
    for resource in resources:
        pod = pod_spec(resource)
        if pod is not None:
            found.extend(pod.get("initContainers", []))
            found.extend(pod.get("containers", []))
    return found


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    if resource["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
        spec: dict[str, Any] = resource["spec"]["template"]["spec"]
        return spec
    return None


def _generate(directory: Path, kind: str, generator: dict[str, Any], out: list[Resource]) -> None:
    data: dict[str, str] = {}
    for env_file in generator.get("envs", []):
        for line in (directory / env_file).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                data[key] = value
    for file in generator.get("files", []):
        data[Path(file).name] = (directory / file).read_text()
    for literal in generator.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    if kind == "Secret":
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    behavior = generator.get("behavior", "create")
    existing = _find(out, kind, generator["name"])
    if behavior == "create":
        if existing is not None:
            raise KustomizeError(f"{kind} {generator['name']} exists: use behavior merge")
        resource: Resource = {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": generator["name"]},
            "data": data,
        }
        if kind == "Secret":
            resource["type"] = "Opaque"
        out.append(resource)
    elif existing is None:
        raise KustomizeError(f"{kind} {generator['name']}: nothing to {behavior}")
    elif behavior == "merge":
        existing.setdefault("data", {}).update(data)
    elif behavior == "replace":
        existing["data"] = data
    else:
        raise KustomizeError(f"unknown generator behavior {behavior!r}")


def _find(resources: list[Resource], kind: str, name: str) -> Resource | None:
    for resource in resources:
        if resource["kind"] == kind and resource["metadata"]["name"] == name:
            return resource
    return None


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        current = target.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        elif (
            isinstance(value, list)
            and isinstance(current, list)
            and all(isinstance(item, dict) and "name" in item for item in [*value, *current])
        ):
            by_name = {item["name"]: item for item in current}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    current.append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)
