"""CDI specs follow the driver (E4), with NVIDIA's real nvidia-ctk.

The lab builds nvidia-ctk from its Go module (tests/lab/ctk) and runs it on a scratch host against the
host's driver files. Its default (NVML) mode needs a real libnvidia-ml, which the lab cannot have; its
management mode finds the driver by its files (libcuda.so.<version>) and needs the device nodes to be
character devices, which the lab's hosts may create (mknod) but not open, so the host's spec is made with
a device root of such nodes: `--mode=management --dev-root=...`, the arguments the role is given too.

A spec made at 535 names libcuda.so.535.183.06. Without nvidia-ctk the plan refuses the host. The window
to 550 regenerates /etc/cdi/nvidia.yaml: afterwards every host path in it exists (read here with PyYAML)
and 535.183.06 appears nowhere. With generate arguments the tool refuses (NVML mode), the next window
(to 580) leaves the node cordoned at upgrade-failed, naming the spec and nvidia-ctk's own words. A device
plugin's spec beside the host's is never rewritten.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from labhelpers import container
from scratchhost import host_row, play, reload_window, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET, NEXT = "535.183.06", "550.90.07", "580.126.09"
KERNEL = "5.15.0-107-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
REPO = Path(__file__).resolve().parents[2]
PODMAN = REPO / "tests" / "lab" / "hosts" / "bin" / "podman"
SPEC = "/etc/cdi/nvidia.yaml"
DEVROOT = "/run/npuops-lab/cdi-dev"
ARGS = ["--mode=management", f"--dev-root={DEVROOT}"]


OTHER = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"  # the device plugin's: never rewritten
OTHER_TEXT = ('{"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu", "devices": [{"name": "GPU-0", '
              '"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}')


@pytest.fixture(scope="module")
def ctk_dir() -> str:
    """nvidia-ctk and nvidia-cdi-hook, built from their Go module."""
    return subprocess.run([str(REPO / "tests" / "lab" / "ctk" / "build.sh")], check=True, capture_output=True,
                          text=True, timeout=900).stdout.strip()


def spec_paths(name: str) -> tuple[str, list[str]]:
    text = hx(name, f"cat {SPEC}").stdout
    spec = yaml.safe_load(text)
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    paths = [m["hostPath"] for e in edits for m in e.get("mounts") or []]
    paths += [n.get("hostPath") or n["path"] for e in edits for n in e.get("deviceNodes") or []]
    paths += [h["path"] for e in edits for h in e.get("hooks") or []]
    return text, paths


def test_the_cdi_spec_is_regenerated_for_the_new_driver(core_v1, lab_kubeconfig, tmp_path, ctk_dir):
    with scratch_host(core_v1, "lab-cdi", ["--kernel", KERNEL, "--driver", OLD], "535") as name:
        report_dir = tmp_path / "reports"
        report_dir.mkdir()
        for tool in ("nvidia-ctk", "nvidia-cdi-hook"):
            subprocess.run([str(PODMAN), "cp", f"{ctk_dir}/{tool}", f"{container(name)}:/usr/bin/{tool}"], check=True)
        mk = (f"mkdir -p {DEVROOT}/dev && for d in /dev/nvidia*; do n=${{d#/dev/}}; case $n in "
              "nvidia[0-9]*) m=${n#nvidia};; nvidiactl) m=255;; nvidia-modeset) m=254;; *) m=0;; esac; "
              f"mknod {DEVROOT}/dev/$n c 195 $m; done")
        assert hx(name, mk).returncode == 0
        made = hx(name, f"nvidia-ctk cdi generate {' '.join(ARGS)} --output={SPEC}")
        assert made.returncode == 0, made.stderr[-2000:]
        text, paths = spec_paths(name)
        assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{OLD}" in paths and f"{DEVROOT}/dev/nvidia0" in paths, paths
        assert "/usr/bin/nvidia-cdi-hook" in paths, paths
        assert hx(name, f"mkdir -p /var/run/cdi && echo '{OTHER_TEXT}' > {OTHER}").returncode == 0

        # no nvidia-ctk to regenerate it: refused in the plan, before any cordon
        assert hx(name, "mv /usr/bin/nvidia-ctk /root/nvidia-ctk").returncode == 0
        play(name, lab_kubeconfig, report_dir, *reload_window(name, report_dir, TARGET, "maintenance_mode=plan"))
        row = host_row(report_dir, name, "latest-plan")
        assert row["status"] == "refused", row
        assert (f"preflight: {name} uses CDI ({SPEC}) and has no nvidia-ctk in PATH to regenerate the specs for the "
                "new driver") in row["reason"], row["reason"]
        assert hx(name, "mv /root/nvidia-ctk /usr/bin/nvidia-ctk").returncode == 0

        rc, out = play(name, lab_kubeconfig, report_dir,
                       *reload_window(name, report_dir, TARGET, {"driver_upgrade_cdi_generate_args": ARGS}))
        assert rc == 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "upgraded" and h["new_version"] == TARGET and h["cdi_regenerated"] == [SPEC], h
        text, paths = spec_paths(name)
        assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{TARGET}" in paths and OLD not in text, paths
        missing = [p for p in paths if hx(name, f"test -e {p}").returncode != 0]
        assert missing == [], missing
        assert hx(name, f"cat {OTHER}").stdout.strip() == OTHER_TEXT  # another component's spec, untouched
        node = core_v1.read_node(name)
        assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable

        # the tool refuses the way the host is told to make the spec (NVML mode without a real libnvidia-ml)
        rc, out = play(name, lab_kubeconfig, report_dir,
                       *reload_window(name, report_dir, NEXT, {"driver_upgrade_cdi_generate_args": ["--mode=nvml"]}))
        h = host_row(report_dir, name)
        assert h["status"] == "failed" and h["failed_phase"] == "verify", h
        assert f"CDI spec {SPEC}: nvidia-ctk cdi generate --output={SPEC} --mode=nvml failed (rc 1)" in h["reason"], h
        assert "ERROR_LIBRARY_NOT_FOUND" in h["reason"], h["reason"]
        # nvidia-ctk writes atomically: the spec left is the 550 one, whose libraries the install removed
        text, paths = spec_paths(name)
        assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{TARGET}" in paths, paths
        assert hx(name, f"test -e /usr/lib/x86_64-linux-gnu/libcuda.so.{TARGET}").returncode != 0
        node = core_v1.read_node(name)
        assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and node.spec.unschedulable
