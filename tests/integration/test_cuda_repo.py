"""NVIDIA's CUDA repository flavour through playbooks/maintenance_window.yml: a branch change.

A scratch host behind its own kwok Node runs 550.90.07 from the lab's model of the CUDA repository
(tests/lab/hosts/README.md, "CUDA repository packages"): ``cuda-drivers-550`` (550.90.07-1) over the
Ubuntu-named closure at 550.90.07-0ubuntu1, built by DKMS, hardened by harden.yml. The metas depend
with ``>=``, so apt alone would take its newest driver (580.159.03) for ``cuda-drivers-580=580.126.09-1``:
the window must install the whole closure at 580.126.09 and remove the 550 one in the same transaction,
end ``upgrade-done`` with the module reloaded, and a rerun changes nothing.
"""

from __future__ import annotations

import json
import uuid

import pytest
from scratchhost import dpkg, play, recap_changed, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET = "550.90.07", "580.126.09"
KERNEL = "5.15.0-119-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
CLOSURE = (
    "nvidia-driver-{b}",
    "nvidia-dkms-{b}",
    "nvidia-kernel-common-{b}",
    "libnvidia-compute-{b}",
    "nvidia-utils-{b}",
    "nvidia-compute-utils-{b}",
)


@pytest.fixture
def cuda_repo_host(core_v1):
    spawn = ["--kernel", KERNEL, "--driver", OLD, "--packaging", "cuda-repo"]
    with scratch_host(core_v1, "lab-cuda", spawn, "550") as n:
        yield n


def versions(name):
    return {p: v for p, (v, _st) in dpkg(name).items()}


def test_branch_change_on_the_cuda_repository_flavour(core_v1, cuda_repo_host, lab_kubeconfig, tmp_path):
    name = cuda_repo_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = versions(name)
    assert before["cuda-drivers-550"] == OLD + "-1", before
    assert {p.format(b="550"): before.get(p.format(b="550")) for p in CLOSURE} == {
        p.format(b="550"): OLD + "-0ubuntu1" for p in CLOSURE
    }
    rc, out = play(name, lab_kubeconfig, report_dir, "harden.yml", f"harden_hosts={name}")
    assert rc == 0, out[-3000:]
    held = set(hx(name, "apt-mark showhold").stdout.split())
    assert {"cuda-drivers-550", "nvidia-driver-550", "nvidia-dkms-550"} <= held, held

    window = [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=cuda-{uuid.uuid4().hex[:5]}",
        {
            "driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%", "drain": {"enable": False}},
            "driver_upgrade_target_version": TARGET,
        },
    ]
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-5000:]
    s = json.loads((report_dir / "latest.json").read_text())
    h = {x["host"]: x for x in s["hosts"]}[name]
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET
    assert (core_v1.read_node(name).metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE

    after = versions(name)
    # the target, not apt's newest 580 (580.159.03) that cuda-drivers-580's >= would take
    assert after["cuda-drivers-580"] == TARGET + "-1", after
    assert {p.format(b="580"): after.get(p.format(b="580")) for p in CLOSURE} == {
        p.format(b="580"): TARGET + "-0ubuntu1" for p in CLOSURE
    }
    gone = {"cuda-drivers-550"} | {p.format(b="550") for p in CLOSURE}
    assert not gone & set(after), sorted(gone & set(after))
    held = set(hx(name, "apt-mark showhold").stdout.split())
    assert {"cuda-drivers-580", "nvidia-driver-580", "nvidia-dkms-580"} <= held, held
    assert not {n for n in held if "550" in n}, held
    assert not core_v1.read_node(name).spec.unschedulable
    # the proprietary module stays proprietary (the flavour is kept)
    assert not [p for p in after if p.endswith("-open")], after

    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-4000:]
    assert "changed=0" in recap_changed(name, out), recap_changed(name, out)
    assert versions(name) == after
