"""MIG layouts survive the upgrade (E5).

The MIG mode is a setting of the GPU and survives a reboot; the GPU and compute instances live in the
driver and are gone once the module is unloaded. The lab's nvidia-smi keeps the instances inside the
loaded module's /sys/module/nvidia (the lab's kmod state), so the reload wipes them as on a real host.
A scratch host with two H100s in MIG mode, carved 3g.40gb + 1g.10gb+me + 1g.10gb and 7g.80gb, goes 535 -> 550 by
module reload: afterwards each GPU has the same GPU instances again (read here from `nvidia-smi mig
-lgi` itself), the node is uncordoned at upgrade-done and the summary says what was made again. A
pending mode change (it would take effect at the reset) is refused in the plan before any cordon. Then
a run killed after its reload: its pre-window record (written by npu_host_window, as the role does) and
a reload by hand leave no GPU instance; the next window, to 580, takes the layout from that kept record.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scratchhost import host_row, play, reload_window, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET, NEXT = "535.183.06", "550.90.07", "580.126.09"
KERNEL = "5.15.0-107-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
MODE_FILE = "/var/lib/npuops-lab/host/mig-mode"
# a GPU instance row of `nvidia-smi mig -lgi`: GPU, name, profile id, instance id, placement
GI_ROW = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+\d+\s+\d+:\d+\s+\|$")


def gpu_instances(name: str) -> dict[int, list[str]]:
    out = hx(name, "nvidia-smi mig -lgi").stdout
    got: dict[int, list[str]] = {}
    for m in filter(None, map(GI_ROW.match, out.splitlines())):
        got.setdefault(int(m.group(1)), []).append(m.group(2))
    return {g: sorted(v) for g, v in got.items()}


def test_the_mig_layout_is_made_again_after_the_reload(core_v1, lab_kubeconfig, tmp_path):
    with scratch_host(core_v1, "lab-mig", ["--kernel", KERNEL, "--driver", OLD], "535") as name:
        report_dir = tmp_path / "reports"
        report_dir.mkdir()
        # GPU 0 turns MIG on at its next reset: a reload or reboot would change what runs on it
        assert hx(name, f"printf '0 Disabled Enabled\\n' > {MODE_FILE}").returncode == 0
        rc, out = play(name, lab_kubeconfig, report_dir,
                       *reload_window(name, report_dir, TARGET, "maintenance_mode=plan"))
        row = host_row(report_dir, name, "latest-plan")
        assert row["status"] == "refused", row
        assert (f"preflight: the MIG layout of {name} could not be made again after the module reload or reboot: "
                "GPU 0 (00000000:18:00.0): MIG mode Disabled now, Enabled after the next GPU reset or reboot"
                ) in row["reason"]
        node = core_v1.read_node(name)
        assert STATE not in (node.metadata.labels or {}) and not node.spec.unschedulable

        # both GPUs in MIG mode, carved as a tenant would
        assert hx(name, f"printf '0 Enabled\\n1 Enabled\\n' > {MODE_FILE}").returncode == 0
        # 1g.10gb+me: its default compute instance is named MIG 1g.10gb, as the real nvidia-smi names it
        assert hx(name, "nvidia-smi mig -i 0 -cgi 9,20,19 -C && nvidia-smi mig -i 1 -cgi 0 -C").returncode == 0
        before = {0: ["1g.10gb", "1g.10gb+me", "3g.40gb"], 1: ["7g.80gb"]}
        assert gpu_instances(name) == before

        rc, out = play(name, lab_kubeconfig, report_dir, *reload_window(name, report_dir, TARGET))
        assert rc == 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "upgraded" and h["new_version"] == TARGET, h
        assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET  # reloaded, so wiped and remade
        assert gpu_instances(name) == before
        assert h["mig_before"] == ["GPU 0 (00000000:18:00.0): MIG 3g.40gb, MIG 1g.10gb+me, MIG 1g.10gb",
                                   "GPU 1 (00000000:28:00.0): MIG 7g.80gb"], h
        assert h["mig_reapplied"] == h["mig_before"], h
        assert "MIG devices made again after the module reload or reboot" in (report_dir / "latest.md").read_text()
        node = core_v1.read_node(name)
        assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable
        assert hx(name, "test -e /var/lib/npuops-fleet/window.json").returncode != 0  # restored, record gone

        # a run killed after its reload: the record it wrote before the host work, then the modules reloaded
        book = tmp_path / "record.yml"
        book.write_text(f"- hosts: {name}\n  gather_facts: false\n  tasks:\n"
                        "    - npuops.fleet.npu_host_window: {state: present, mig_smi: nvidia-smi, run_id: killed}\n")
        rc, out = play(name, lab_kubeconfig, report_dir, str(Path(book).resolve()))
        assert rc == 0, out[-4000:]
        assert hx(name, "modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia; modprobe nvidia").returncode == 0
        assert gpu_instances(name) == {}
        rc, out = play(name, lab_kubeconfig, report_dir, *reload_window(name, report_dir, NEXT))
        assert rc == 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "upgraded" and h["new_version"] == NEXT, h
        # no MIG device ran when this run started...
        assert h["mig_before"] == ["GPU 0 (00000000:18:00.0): none", "GPU 1 (00000000:28:00.0): none"], h
        assert h["mig_reapplied"] == ["GPU 0 (00000000:18:00.0): MIG 3g.40gb, MIG 1g.10gb+me, MIG 1g.10gb",
                                      "GPU 1 (00000000:28:00.0): MIG 7g.80gb"], h  # ...the kept record knew
        assert gpu_instances(name) == before
        assert hx(name, "test -e /var/lib/npuops-fleet/window.json").returncode != 0
