"""Ubuntu's precompiled flavour through playbooks/maintenance_window.yml: a branch change and a kernel
patch in one window, with the per-kernel signed module packages (linux-restricted-modules).

A scratch host behind its own kwok Node runs 550.90.07 from ``linux-modules-nvidia-550-server-open-
5.15.0-119-generic`` (no DKMS, no headers), hardened by harden.yml. The window moves it to 580.126.09
and kernel 5.15.0-177-generic: one apt transaction installs the new kernel, its 580 module package
(the one whose Depends pins nvidia-kernel-common-580-server at 580.126.09, although apt's newest for
that kernel is the 580.159.03 build) and the 580 userspace, and removes the 550 module package and
kernel-common; the host reboots into the new kernel, verify sees 580.126.09, and a rerun changes
nothing. The lab repository models the real packages' relationships (tests/lab/hosts/repo/build_repo.py).
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
K_OLD, K_NEW = "5.15.0-119-generic", "5.15.0-177-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"


@pytest.fixture
def precompiled_host(core_v1):
    spawn = ["--kernel", K_OLD, "--driver", OLD, "--packaging", "precompiled"]
    with scratch_host(core_v1, "lab-lrm", spawn, "550") as n:
        yield n


def test_branch_change_and_kernel_patch_on_precompiled_modules(core_v1, precompiled_host, lab_kubeconfig, tmp_path):
    name = precompiled_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = dpkg(name)
    assert f"linux-modules-nvidia-550-server-open-{K_OLD}" in before and not any("dkms" in p for p in before), before
    assert not any(p.startswith("linux-headers-") for p in before), before
    rc, out = play(name, lab_kubeconfig, report_dir, "harden.yml", f"harden_hosts={name}")
    assert rc == 0, out[-3000:]
    held = set(hx(name, "apt-mark showhold").stdout.split())
    assert {f"linux-modules-nvidia-550-server-open-{K_OLD}", "nvidia-kernel-common-550-server"} <= held, held

    window = [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=lrm-{uuid.uuid4().hex[:5]}",
        {
            "driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%", "drain": {"enable": False}},
            "driver_upgrade_target_version": TARGET,
            "driver_upgrade_kernel_release": K_NEW,
        },
    ]
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-5000:]
    s = json.loads((report_dir / "latest.json").read_text())
    h = {x["host"]: x for x in s["hosts"]}[name]
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    assert h["rebooted"] is True and h["kernel_after"] == K_NEW, h
    assert hx(name, "uname -r").stdout.strip() == K_NEW
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET

    after = dpkg(name)
    # the 580.126.09 build for the new kernel (+1), not apt's newest for it (+2, the 580.159.03 build)
    assert after[f"linux-modules-nvidia-580-server-open-{K_NEW}"][0] == "5.15.0-177.187+1", after
    assert after["nvidia-kernel-common-580-server"][0] == TARGET + "-0ubuntu1", after
    gone = {
        f"linux-modules-nvidia-550-server-open-{K_OLD}",
        "nvidia-kernel-common-550-server",
        "nvidia-utils-550-server",
        "libnvidia-compute-550-server",
    }
    assert not gone & set(after), sorted(gone & set(after))
    held = set(hx(name, "apt-mark showhold").stdout.split())
    assert {
        f"linux-modules-nvidia-580-server-open-{K_NEW}",
        "nvidia-kernel-common-580-server",
        f"linux-image-{K_NEW}",
    } <= held, held
    assert (core_v1.read_node(name).metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE

    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-4000:]
    assert "changed=0" in recap_changed(name, out), recap_changed(name, out)
    assert dpkg(name) == after
