"""Fixture pods (API dicts) for the eviction-rule and operand tests."""

from __future__ import annotations

from typing import Any


def pod(
    name: str,
    ns: str = "default",
    owner: str | None = "ReplicaSet",
    phase: str = "Running",
    labels=None,
    volumes=None,
    resources=None,
    node_selector=None,
    annotations=None,
    owner_name: str | None = None,
    deleting: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": "uid-" + name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": owner_name or name + "-owner", "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    container = {"name": "c", "resources": resources or {}}
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes or []}
    if node_selector:
        spec["nodeSelector"] = node_selector
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": meta, "spec": spec, "status": status}


GPU = {"limits": {"nvidia.com/gpu": "1"}}
EMPTYDIR = [{"name": "scratch", "emptyDir": {}}]


DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"


def gpu_labels(version: str = "535.183.06", **extra: str) -> dict[str, str]:
    """Labels of an NVIDIA GPU node (presence, GFD driver version, two deploy labels) plus ``extra``."""
    major, minor, rev = version.split(".")
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/gpu.deploy.driver": "true",
        DEVICE_PLUGIN: "true",
    }
    labels.update(extra)
    return labels


def on(node: str, p: dict[str, Any]) -> dict[str, Any]:
    """The pod ``p`` scheduled on ``node``."""
    p["spec"]["nodeName"] = node
    return p
