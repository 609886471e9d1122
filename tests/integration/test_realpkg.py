"""Debian's REAL NVIDIA packages and the REAL dkms through playbooks/maintenance_window.yml.

The host (tests/lab/realpkg, ``hostctl spawn --realpkg``) runs Debian bookworm's nvidia-graphics-drivers
535.216.03 (bookworm-backports) as its archive packages it: ``nvidia-kernel-dkms`` compiled by the real
dkms against the real ``linux-headers-6.1.0-50-amd64`` into ``updates/dkms/nvidia-current.ko``, indexed
by the real depmod. What cannot exist in a container is simulated: the booted kernel, loading modules
(kmodsim reads the real ELF module: the kernel's name ``nvidia`` from its .modinfo, its version), the
GPUs (nvidia-smi and nvidia-persistenced diverted to the lab's, which read the real libnvidia-ml
package's library version and the loaded module).

harden.yml holds the driver family; the window moves it in-branch to 535.261.03 (bookworm): one apt
transaction releases the family's holds, the real dkms rebuilds the module, the role unloads and loads
it back by its Debian file name (nvidia-current), verify reads 535.261.03 everywhere, the holds are
back, and a rerun changes nothing.

Two more tests run a host with bookworm's Tesla 470 branch (``--realpkg-set tesla470``): a branch change
to Tesla 535 (the branches install side by side, so the whole 470 branch must leave in the transaction
and each of its packages come back as 535's), and a kernel patch to bookworm-backports' 6.12, which
bookworm's 470 cannot be built for: the real dkms fails during the apt transaction and the window stops
before the reboot.

Each test pays one real DKMS build (3-9 minutes on 2 cores) plus, cold, its image's (~4-11 minutes): they
all run in ``make test-realpkg`` (NPUOPS_REALPKG=1); ``make test`` (NPUOPS_REALPKG=auto) runs one of those whose
image is already cached, the one run least recently (tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from scratchhost import dpkg, play, recap_changed, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = [
    pytest.mark.lab,
    # conftest.py keeps these only with NPUOPS_REALPKG=1 (all) or auto (`make test`: one with a cached image)
    pytest.mark.skipif(os.environ.get("NPUOPS_REALPKG") not in ("1", "auto"),
                       reason="real-package lab: make test-realpkg"),
]

OLD, TARGET = "535.216.03", "535.261.03"
KERNEL = "6.1.0-50-amd64"
STATE = "nvidia.com/gpu-driver-upgrade-state"
# what moves in-branch: the nvidia-graphics-drivers binaries at the exact version (FINDINGS.md)
MOVING = {
    "nvidia-kernel-dkms",
    "nvidia-smi",
    "libnvidia-ml1",
    "firmware-nvidia-gsp",
    "libnvidia-cfg1",
    "nvidia-alternative",
    "nvidia-kernel-support",
    "nvidia-legacy-check",
}


@pytest.fixture
def realpkg_host(core_v1):
    with scratch_host(core_v1, "lab-realpkg", ["--realpkg"], "535", timeout=3600) as n:
        yield n


@pytest.mark.realpkg_set("before")
def test_in_branch_upgrade_with_real_debian_packages_and_real_dkms(core_v1, realpkg_host, lab_kubeconfig, tmp_path):
    name = realpkg_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = dpkg(name)
    assert before["nvidia-kernel-dkms"][0] == OLD + "-2~bpo12+1", before
    assert hx(name, "dkms status").stdout.strip() == f"nvidia-current/{OLD}, {KERNEL}, x86_64: installed"
    # the kernel's name for Debian's nvidia-current.ko, and the version the real module carries
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == OLD
    assert hx(name, "modprobe -n nvidia; echo rc=$?").stdout.strip().endswith("rc=1")

    # what udev loads by the device's PCI alias at boot (nvidia_uvm is not among them on Debian)
    loaded = set(hx(name, "ls /sys/module").stdout.split()) & {"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"}
    assert loaded == {"nvidia", "nvidia_modeset", "nvidia_drm"}, loaded

    rc, out = play(name, lab_kubeconfig, report_dir, "harden.yml", f"harden_hosts={name}")
    assert rc == 0, out[-3000:]
    held_before = set(hx(name, "apt-mark showhold").stdout.split())
    assert MOVING <= held_before, sorted(MOVING - held_before)

    window = [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=realpkg-{uuid.uuid4().hex[:5]}",
        {
            "driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%", "drain": {"enable": False}},
            "driver_upgrade_target_version": TARGET,
        },
    ]
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-6000:]
    s = json.loads((report_dir / "latest.json").read_text())
    h = {x["host"]: x for x in s["hosts"]}[name]
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    assert (core_v1.read_node(name).metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE

    after = dpkg(name)
    assert {p: after[p][0] for p in MOVING} == {p: TARGET + "-1" for p in MOVING}, after
    # the real dkms built the new module for the boot kernel and dropped the old one
    assert hx(name, "dkms status").stdout.strip() == f"nvidia-current/{TARGET}, {KERNEL}, x86_64: installed"
    ko = f"/lib/modules/{KERNEL}/updates/dkms/nvidia-current.ko"
    assert hx(name, f"modinfo -F version {ko}").stdout.strip() == TARGET
    # every module that was loaded is loaded again, each the new build, and nothing else
    versions = hx(
        name, "for m in nvidia nvidia_modeset nvidia_drm nvidia_uvm; do echo $m $(cat /sys/module/$m/version); done"
    )
    assert dict((ln.split() + [""])[:2] for ln in versions.stdout.splitlines()) == {
        "nvidia": TARGET,
        "nvidia_modeset": TARGET,
        "nvidia_drm": TARGET,
        "nvidia_uvm": "",
    }, versions.stdout
    assert hx(name, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    assert set(hx(name, "apt-mark showhold").stdout.split()) == held_before
    assert not core_v1.read_node(name).spec.unschedulable

    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-4000:]
    assert "changed=0" in recap_changed(name, out), recap_changed(name, out)
    assert dpkg(name) == after


# Debian's Tesla branches (pins.txt sets tesla470 / tesla535 / kernel612): the host image has bookworm's
# nvidia-graphics-drivers-tesla-470 built by the real dkms; 535 is the other Tesla branch bookworm has.
T470, T470_DEB = "470.256.02", "470.256.02-1~deb12u1"
T535, T535_DEB = "535.216.03", "535.216.03-3~deb12u1"
# bookworm-backports' kernel, which bookworm's 470.256.02-1~deb12u1 cannot be built for (Debian fixed the
# build for Linux 6.12 in 470.256.02-5; bugs 1089964, 1090252, 1091193)
K612 = "6.12.95+deb12-amd64"
# the branch's packages on such a host: the four pins.txt names and the two apt adds (alternative, kernel-support)
TESLA = ["nvidia-tesla-{b}-kernel-dkms", "nvidia-tesla-{b}-smi", "libnvidia-tesla-{b}-ml1",
         "libnvidia-tesla-{b}-cfg1", "nvidia-tesla-{b}-alternative", "nvidia-tesla-{b}-kernel-support"]


@pytest.fixture
def tesla_host(core_v1):
    with scratch_host(core_v1, "lab-tesla", ["--realpkg-set", "tesla470"], "470", timeout=3600) as n:
        yield n


def _window(name, report_dir, **extra):
    return [
        "maintenance_window.yml",
        f"maintenance_hosts={name}",
        f"maintenance_report_dir={report_dir}",
        f"maintenance_lease_name=realpkg-{uuid.uuid4().hex[:5]}",
        {"driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%", "drain": {"enable": False}},
         **extra},
    ]


def _tesla_hardened(name, kubeconfig, tmp_path):
    """The Tesla 470 host as the image built it, then hardened; -> (report dir, held packages)."""
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = dpkg(name)
    assert {p.format(b="470"): before[p.format(b="470")][0] for p in TESLA} == {
        p.format(b="470"): T470_DEB for p in TESLA}, before
    assert hx(name, "dkms status").stdout.strip() == f"nvidia-tesla-470/{T470}, {KERNEL}, x86_64: installed"
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == T470
    assert hx(name, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    rc, out = play(name, kubeconfig, report_dir, "harden.yml", f"harden_hosts={name}")
    assert rc == 0, out[-3000:]
    held = set(hx(name, "apt-mark showhold").stdout.split())
    assert {p.format(b="470") for p in TESLA} <= held, held
    return report_dir, held


@pytest.mark.realpkg_set("tesla470")
def test_tesla_branch_change_470_to_535_with_real_debian_packages_and_real_dkms(
    core_v1, tesla_host, lab_kubeconfig, tmp_path
):
    name = tesla_host
    report_dir, _held = _tesla_hardened(name, lab_kubeconfig, tmp_path)
    window = _window(name, report_dir, driver_upgrade_target_version=T535)
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-6000:]
    s = json.loads((report_dir / "latest.json").read_text())
    h = {x["host"]: x for x in s["hosts"]}[name]
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h

    after = dpkg(name)
    # the whole 470 branch left in the same transaction (nothing conflicts: the branches co-install) and
    # each of its packages has its 535 counterpart, persistenced's libnvidia-cfg1 included
    assert sorted(p for p in after if "-470-" in p or p.endswith("-470")) == [], sorted(after)
    want = {p.format(b="535"): T535_DEB for p in TESLA} | {"firmware-nvidia-tesla-535-gsp": T535_DEB}
    assert {p: after.get(p, ("-",))[0] for p in want} == want, after
    assert "libnvidia-cfg1" not in after and "nvidia-alternative" not in after, sorted(after)
    # one DKMS module: the real dkms built 535 for the boot kernel and removed 470 with its package
    assert hx(name, "dkms status").stdout.strip() == f"nvidia-tesla-535/{T535}, {KERNEL}, x86_64: installed"
    ko = hx(name, f"ls /lib/modules/{KERNEL}/updates/dkms/").stdout.split()
    assert sorted(ko) == sorted(f"nvidia-tesla-535{s}.ko" for s in ("", "-modeset", "-drm", "-uvm", "-peermem")), ko
    versions = hx(name, "for m in nvidia nvidia_modeset nvidia_drm; do cat /sys/module/$m/version; done").stdout
    assert versions.split() == [T535] * 3, versions
    assert hx(name, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    smi = hx(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()
    assert smi and set(smi) == {T535}, smi  # one line per simulated GPU
    held_after = set(hx(name, "apt-mark showhold").stdout.split())
    assert {p.format(b="535") for p in TESLA} <= held_after, held_after
    assert not {p for p in held_after if "-470-" in p or p.endswith("-470")}, held_after
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable

    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-4000:]
    assert "changed=0" in recap_changed(name, out), recap_changed(name, out)
    assert dpkg(name) == after


@pytest.mark.realpkg_set("tesla470")
def test_a_real_dkms_build_that_fails_for_the_patched_kernel_stops_before_the_reboot(
    core_v1, tesla_host, lab_kubeconfig, tmp_path
):
    """A kernel patch to bookworm-backports' 6.12 on a Tesla 470 host: the real dkms compiles bookworm's
    470.256.02 for it during the apt transaction and fails (the real compiler's errors in make.log)."""
    name = tesla_host
    report_dir, held_before = _tesla_hardened(name, lab_kubeconfig, tmp_path)
    boot_before = hx(name, "cat /run/npuops-lab/boot_id").stdout.strip()

    window = _window(name, report_dir, driver_upgrade_target_version=T470, driver_upgrade_kernel_release=K612)
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc != 0, out[-6000:]
    s = json.loads((report_dir / "latest.json").read_text())
    h = {x["host"]: x for x in s["hosts"]}[name]
    log = f"/var/lib/dkms/nvidia-tesla-470/{T470}/build/make.log"
    assert h["status"] == "failed" and h["final_state"] == sm.UPGRADE_FAILED, h
    assert f"DKMS module build failed for kernel {K612}; see {log}" in h["reason"], h["reason"]
    assert h["rebooted"] is False and hx(name, "cat /run/npuops-lab/boot_id").stdout.strip() == boot_before
    assert "error" in hx(name, f"cat {log}").stdout  # the real compiler's
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and node.spec.unschedulable is True
    # the running driver is untouched and its service runs; the holds are back
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == T470
    assert hx(name, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    assert held_before <= set(hx(name, "apt-mark showhold").stdout.split())
    assert hx(name, "dkms status").stdout.strip().startswith(f"nvidia-tesla-470/{T470}, {KERNEL}, x86_64: installed")
