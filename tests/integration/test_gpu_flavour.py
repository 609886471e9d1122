"""The target's kernel modules must drive every GPU of the host, checked before any cordon (E3).

NVIDIA's open kernel modules do not drive Maxwell, Pascal or Volta GPUs (no GSP); installed anyway,
the module loads and initializes no GPU. The preflight reads the driver's own table of the GPUs it
supports (the lab packages carry a supported-gpus.json shaped as NVIDIA's) out of the target's
packages and the host's GPUs off its PCI bus (the lab writes that bus under /run/npuops-lab/pci from
hw.conf). A scratch host with the open flavour (ubuntu-server-open, 535): with its H100s the plan says
the table was checked; with its GPUs turned into Tesla P4s (10de:1bb3) the plan refuses the host and
the window fails it in the preflight, naming each GPU and the flavours that would drive it, with the
node untouched (no state label, schedulable) and dpkg's view of the host unchanged.
"""

from __future__ import annotations

import pytest
from scratchhost import dpkg, host_row, play, reload_window, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET = "535.183.06", "550.90.07"
KERNEL = "5.15.0-107-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
PCI = "/run/npuops-lab/pci/devices"


def window(name: str, report_dir, *extra) -> list:
    return reload_window(name, report_dir, TARGET, *extra)


def test_open_modules_and_pascal_gpus_are_refused_before_any_cordon(core_v1, lab_kubeconfig, tmp_path):
    with scratch_host(core_v1, "lab-gpuflavour", ["--kernel", KERNEL, "--driver", OLD], "535") as name:
        report_dir = tmp_path / "reports"
        report_dir.mkdir()
        gpus = hx(name, f"ls {PCI}").stdout.split()
        assert gpus == ["0000:18:00.0", "0000:28:00.0"], gpus
        assert hx(name, "dpkg-query -W -f='${Package}\\n' 'nvidia-dkms-*'").stdout.split() == [
            "nvidia-dkms-535-server-open"]

        # H100s: the table in the target's packages drives them; the plan says where it came from
        rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir, "maintenance_mode=plan"))
        assert rc == 0, out[-4000:]
        row = host_row(report_dir, name, "latest-plan")
        assert row["status"] == "would-upgrade", row
        g = row["gpu_support"]
        assert g["checked"] is True and g["gpus"] == 2 and g["unsupported"] == [], g
        assert g["source"].endswith("nvidia-driver-550-server-open_550.90.07-0ubuntu1_amd64.deb:"
                                    "usr/share/doc/nvidia-driver-550-server-open/supported-gpus.json"), g

        # the same host with Pascal GPUs (Tesla P4)
        for addr in gpus:
            assert hx(name, f"echo 0x1bb3 > {PCI}/{addr}/device; echo 0x0000 > {PCI}/{addr}/subsystem_device"
                      ).returncode == 0
        before = dpkg(name)
        why = (f"preflight: the target's open kernel modules (packaging ubuntu-server-open) cannot drive 2 of the 2 "
               f"GPU(s) of {name}, nothing was changed: 0000:18:00.0, 0000:28:00.0 (2 GPUs, PCI ID 10de:1bb3, "
               f"Tesla P4) run only with the proprietary kernel modules; the proprietary kernel modules drive them: "
               f"choose a flavour with them "
               f"(ubuntu-server, cuda-repo, ubuntu-precompiled-server); set driver_upgrade_packaging to one of them "
               f"for this host (host_vars or group_vars), or driver_upgrade_gpu_support_check: false to skip this "
               f"check (NVIDIA's table ")
        rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir, "maintenance_mode=plan"))
        row = host_row(report_dir, name, "latest-plan")
        assert row["status"] == "refused" and why in (row["reason"] or ""), row
        g = row["gpu_support"]  # the refusing check's answer per GPU, in the plan's row too
        assert g["checked"] is True and [u["address"] for u in g["unsupported"]] == gpus, g

        rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir))
        assert rc != 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "failed" and h["failed_phase"] == "preflight" and why in h["reason"], h
        node = core_v1.read_node(name)
        assert STATE not in (node.metadata.labels or {}) and not node.spec.unschedulable, node.metadata.labels
        assert dpkg(name) == before
        assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == OLD


def test_with_the_check_off_the_open_module_refuses_pascal_gpus_and_the_reload_says_so(
        core_v1, lab_kubeconfig, tmp_path):
    """What the check prevents: the lab's nvidia.ko init refuses GPUs as nv.c does (the open module and a
    GPU without kernelopen in the installed table), writes the kernel's lines and does not stay loaded;
    the reload fails naming the kernel log's reason, and the node stays cordoned, upgrade-failed."""
    with scratch_host(core_v1, "lab-gpuflavour", ["--kernel", KERNEL, "--driver", OLD], "535") as name:
        report_dir = tmp_path / "reports"
        report_dir.mkdir()
        for addr in hx(name, f"ls {PCI}").stdout.split():
            hx(name, f"echo 0x1bb3 > {PCI}/{addr}/device; echo 0x0000 > {PCI}/{addr}/subsystem_device")
        rc, out = play(name, lab_kubeconfig, report_dir,
                       *window(name, report_dir, {"driver_upgrade_gpu_support_check": False}))
        assert rc != 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "failed" and h["failed_phase"] == "reload", h
        assert "ERROR: could not insert 'nvidia': No such device" in h["reason"], h["reason"]
        assert "module flavour not supported on this GPU (0000:18:00.0, 0000:28:00.0; kernel log: " in h["reason"]
        assert "NVRM: The NVIDIA GPU 0000:18:00.0 (PCI ID: 10de:1bb3)" in h["reason"], h["reason"]
        node = core_v1.read_node(name)
        assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and node.spec.unschedulable
        assert hx(name, "test -e /sys/module/nvidia").returncode != 0  # nothing stayed loaded
        assert "None of the NVIDIA devices were initialized." in hx(name, "cat /run/npuops-lab/kmsg").stdout


def test_proprietary_modules_and_blackwell_gpus_refused_then_unseen_after_the_reload(
        core_v1, lab_kubeconfig, tmp_path):
    """The other way round: NVIDIA's CUDA repository's proprietary flavour (cuda-repo) and B200s, which
    run only with the open modules. The plan refuses the host naming the open flavours; with the check
    off, the driver loads and fails the GPUs at their first open (RmInitAdapter), nvidia-smi finds no
    devices, and verify names the kernel log's reason; the node stays cordoned, upgrade-failed."""
    spawn = ["--kernel", "5.15.0-119-generic", "--driver", "550.90.07", "--packaging", "cuda-repo"]
    with scratch_host(core_v1, "lab-gpuflavour", spawn, "550") as name:
        report_dir = tmp_path / "reports"
        report_dir.mkdir()
        for addr in hx(name, f"ls {PCI}").stdout.split():
            hx(name, f"echo 0x2901 > {PCI}/{addr}/device; echo 0x1999 > {PCI}/{addr}/subsystem_device")
        target = "580.126.09"
        play(name, lab_kubeconfig, report_dir, *reload_window(name, report_dir, target, "maintenance_mode=plan"))
        row = host_row(report_dir, name, "latest-plan")
        assert row["status"] == "refused", row
        assert ("0000:18:00.0, 0000:28:00.0 (2 GPUs, PCI ID 10de:2901, NVIDIA B200) run only with the open kernel "
                "modules; the open kernel modules drive them: choose a flavour with them (cuda-repo-open, ") \
            in row["reason"], row["reason"]

        rc, out = play(name, lab_kubeconfig, report_dir,
                       *reload_window(name, report_dir, target, {"driver_upgrade_gpu_support_check": False}))
        assert rc != 0, out[-4000:]
        h = host_row(report_dir, name)
        assert h["status"] == "failed" and h["failed_phase"] == "verify", h
        assert h["reason"].startswith(f"verify failed on {name}: module flavour not supported on this GPU "
                                      "(0000:18:00.0, 0000:28:00.0; kernel log: "), h["reason"]
        assert "requires use of the NVIDIA open kernel modules" in h["reason"], h["reason"]
        assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == target  # loaded, no GPU driven
        node = core_v1.read_node(name)
        assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and node.spec.unschedulable
