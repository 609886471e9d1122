"""One scratch lab host behind its own kwok Node, and the window playbooks run on it alone.

Used by the flavour tests (test_precompiled, test_cuda_repo, test_realpkg): each spawns a host of
one packaging flavour with ``hostctl spawn --node``, waits until the node agent publishes its driver
labels, runs harden.yml and maintenance_window.yml against an inventory of that host only, and reads
dpkg's view of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from labhelpers import REPO, create_kwok_nodes, delete_nodes, run_playbook, wait
from test_host_lost import HOSTCTL, hostctl, hx, lab_dir

GPU_CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"}


@contextlib.contextmanager
def scratch_host(core_v1: Any, prefix: str, spawn: list[str], driver_major: str, timeout: int = 600) -> Iterator[str]:
    """A kwok Node ``<prefix>-*`` and its host (``hostctl spawn NAME --node *spawn``); yields the name once
    the Node carries ``nvidia.com/cuda.driver.major == driver_major``; removes both afterwards."""
    name = create_kwok_nodes(core_v1, prefix, 1, labels={"nvidia.com/gpu.present": "true"}, capacity=GPU_CAPACITY)[0]
    try:
        hostctl("spawn", name, "--node", *spawn, timeout=timeout)
        wait(
            f"{name}: driver labels from the node agent",
            lambda: (core_v1.read_node(name).metadata.labels or {}).get("nvidia.com/cuda.driver.major") == driver_major,
            90,
        )
        yield name
    finally:
        subprocess.run(
            [str(HOSTCTL), "rm", name],
            capture_output=True,
            env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())),
            check=False,
        )
        delete_nodes(core_v1, [name])


def play(name: str, kubeconfig: str, report_dir: Path, book: str, *extra: Any) -> tuple[int, str]:
    """playbooks/<book> with the lab inventory narrowed to ``name`` (group gpu_nodes); (rc, output)."""
    inv = report_dir / "hosts.yml"
    inv.write_text(f"all:\n  children:\n    gpu_nodes:\n      hosts:\n        {name}:\n")
    return run_playbook(book, [str(REPO / "inventories" / "lab"), str(inv)], extra, kubeconfig, report_dir)


def reload_window(name: str, report_dir: Path, target: str, *extra: Any) -> list:
    """play()'s arguments for maintenance_window.yml on ``name`` alone to ``target``: its own Lease, no
    drain, no reboot, no width limit (the host's reload path is what these tests look at)."""
    return [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=scratch-{uuid.uuid4().hex[:5]}",
        {
            "driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%",
                                      "drain": {"enable": False}, "reboot": {"enable": False}},
            "driver_upgrade_target_version": target,
        },
        *extra,
    ]


def host_row(report_dir: Path, name: str, kind: str = "latest") -> dict:
    """The host's row of the window's summary (``latest``) or plan (``latest-plan``)."""
    return {x["host"]: x for x in json.loads((report_dir / f"{kind}.json").read_text())["hosts"]}[name]


def dpkg(name: str) -> dict[str, tuple[str, str]]:
    """Installed packages of the host: name -> (version, dpkg status abbreviation)."""
    out = hx(name, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'").stdout
    return {p: (v, st) for p, v, st in (ln.split() for ln in out.splitlines() if len(ln.split()) == 3) if st[1] == "i"}


def recap_changed(name: str, out: str) -> str:
    """The PLAY RECAP line of ``name`` (empty when there is none)."""
    recap = [ln for ln in out.splitlines() if ln.startswith(name + " ") and "changed=" in ln]
    return recap[-1] if recap else ""
