"""A process holds the GPU: the module reload names it and the window stops that host, cordoned; once
the holder is gone a rerun goes on and reloads (playbooks/maintenance_window.yml, npu_kmod_reload).

A scratch host behind its own kwok Node runs 535.183.06 with nvidia-persistenced; a second process
outside any vendor service keeps /dev/nvidia0 open, so rmmod of the main module fails as the kernel
says ("Module nvidia is in use"). With no reboot allowed the host must fail in the reload phase with
that holder's PID and command line, the node upgrade-failed and still cordoned; after the holder is
killed a rerun must end upgrade-done with the target module loaded and the node schedulable.
"""

from __future__ import annotations

import json
import uuid

import pytest
from scratchhost import play, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET = "535.183.06", "550.90.07"
KERNEL = "5.15.0-107-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"


@pytest.fixture
def in_use_host(core_v1):
    spawn = ["--kernel", KERNEL, "--driver", OLD, "--service", "nvidia-persistenced"]
    with scratch_host(core_v1, "lab-inuse", spawn, "535") as n:
        yield n


def test_a_process_holding_the_gpu_stops_the_reload_and_a_rerun_finishes(
    core_v1, in_use_host, lab_kubeconfig, tmp_path
):
    name = in_use_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    hx(name, "sleep 3000 < /dev/nvidia0 > /dev/null 2>&1 & echo $! > /run/holder.pid")
    pid = hx(name, "cat /run/holder.pid").stdout.strip()
    window = [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=inuse-{uuid.uuid4().hex[:5]}",
        {
            "driver_upgrade_policy": {
                "maxParallelUpgrades": 0,
                "maxUnavailable": "100%",
                "drain": {"enable": False},
                "reboot": {"enable": False},
            },
            "driver_upgrade_target_version": TARGET,
            "driver_upgrade_reboot_allowed": False,
        },
    ]
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc != 0, out[-3000:]
    h = {x["host"]: x for x in json.loads((report_dir / "latest.json").read_text())["hosts"]}[name]
    assert h["status"] == "failed" and h["failed_phase"] == "reload", h
    assert h["reason"].startswith("module reload impossible: rmmod: ERROR: Module nvidia is in use"), h["reason"]
    assert f"pid {pid} (sleep 3000)" in h["reason"], h["reason"]
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED
    assert node.spec.unschedulable is True
    # nothing was loaded back: the old module is still the loaded one
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == OLD

    hx(name, "kill $(cat /run/holder.pid)")
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-5000:]
    h = {x["host"]: x for x in json.loads((report_dir / "latest.json").read_text())["hosts"]}[name]
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE
    assert not node.spec.unschedulable
    assert hx(name, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
