"""NVIDIA's CUDA repository from branch 590 through playbooks/maintenance_window.yml: branchless names.

The lab's model of the repository (tests/lab/hosts/README.md, "CUDA repository 590+") offers 590.48.01 and
610.43.02 under the same names (``nvidia-driver-open``, ``nvidia-dkms-open``, ``libnvidia-compute``...,
metas ``nvidia-open`` / ``cuda-drivers`` that depend with ``>=``), so apt's candidate for each is 610
until a pinning package (``nvidia-driver-pinning-590.48.01``, an apt preferences file) is active.

- A host on the 580 suffixed names (``nvidia-open-580`` over ``nvidia-driver-580-open``) moves to
  590.48.01 in one transaction: the branchless closure at 590.48.01, ``nvidia-modprobe`` (which the meta
  needs at ``>=``) at 590.48.01 too, not apt's 610, the pinning package installed, every 580 name removed,
  the branchless names held; afterwards the pin makes 590.48.01 apt's candidate; a rerun changes nothing.
- A host whose meta (``cuda-drivers``) also needs ``nvidia-settings (>= 590.48.01)``, which the
  repository offers only at 610.43.02: the preflight refuses it before any cordon, naming the package and
  the version apt would take; node and packages untouched.
"""

from __future__ import annotations

import pytest
from scratchhost import dpkg, host_row, play, recap_changed, reload_window, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET, NEWEST = "580.126.09", "590.48.01", "610.43.02"
KERNEL = "5.15.0-119-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
BRANCHLESS = ("nvidia-driver-open", "nvidia-dkms-open", "nvidia-kernel-common", "libnvidia-compute", "nvidia-utils",
              "nvidia-compute-utils")


def versions(name):
    return {p: v for p, (v, _st) in dpkg(name).items()}


def held(name):
    return set(hx(name, "apt-mark showhold").stdout.split())


@pytest.fixture
def open_580(core_v1):
    with scratch_host(core_v1, "lab-cuda590", ["--kernel", KERNEL, "--driver", OLD, "--packaging", "cuda-repo-open"],
                      "580") as n:
        yield n


@pytest.fixture
def proprietary_580(core_v1):
    with scratch_host(core_v1, "lab-cuda590p", ["--kernel", KERNEL, "--driver", OLD, "--packaging", "cuda-repo"],
                      "580") as n:
        yield n


def test_a_move_onto_the_branchless_names_with_the_pinning_package(core_v1, open_580, lab_kubeconfig, tmp_path):
    name = open_580
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = versions(name)
    assert before["nvidia-open-580"] == OLD + "-1" and before["nvidia-dkms-580-open"] == OLD + "-0ubuntu1", before
    # without a pin, the repository's newest branch is every branchless name's candidate
    policy = hx(name, "apt-cache policy nvidia-driver-open").stdout
    assert f"Candidate: {NEWEST}-0ubuntu1" in policy, policy
    rc, out = play(name, lab_kubeconfig, report_dir, "harden.yml", f"harden_hosts={name}")
    assert rc == 0, out[-3000:]

    window = reload_window(name, report_dir, TARGET)
    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-5000:]
    h = host_row(report_dir, name)
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable

    after = versions(name)
    assert {p: after.get(p) for p in BRANCHLESS} == {p: TARGET + "-0ubuntu1" for p in BRANCHLESS}, after
    assert after["nvidia-open"] == TARGET + "-1", after
    # the meta's >= dependency: the target's build, not apt's candidate from 610
    assert after["nvidia-modprobe"] == TARGET + "-1", after
    assert after["nvidia-driver-pinning-" + TARGET] == TARGET + "-1", after
    assert not [p for p, v in after.items() if "580" in p or v.startswith(OLD) or v.startswith(NEWEST)], after
    hold = held(name)
    assert set(BRANCHLESS) | {"nvidia-open", "nvidia-modprobe"} <= hold, hold
    assert not {n for n in hold if "580" in n}, hold
    # the pin is active now: apt's candidate is the target, whatever the newest branch
    for pkg in ("nvidia-driver-open", "nvidia-open"):
        policy = hx(name, f"apt-cache policy {pkg}").stdout
        assert f"Candidate: {TARGET}-" in policy, policy

    rc, out = play(name, lab_kubeconfig, report_dir, *window)
    assert rc == 0, out[-4000:]
    assert "changed=0" in recap_changed(name, out), recap_changed(name, out)
    assert versions(name) == after


def test_a_dependency_only_the_newest_branch_offers_refuses_the_host_before_any_cordon(
    core_v1, proprietary_580, lab_kubeconfig, tmp_path
):
    name = proprietary_580
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = versions(name)
    assert before["cuda-drivers-580"] == OLD + "-1", before
    node_before = core_v1.read_node(name)

    rc, out = play(name, lab_kubeconfig, report_dir, *reload_window(name, report_dir, TARGET))
    assert rc != 0, out[-4000:]
    h = host_row(report_dir, name)
    assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
    assert f"candidate for nvidia-settings is {NEWEST}-1, target {TARGET}" in h["reason"], h["reason"]
    assert "no pinning package" in h["reason"], h["reason"]
    assert h["final_state"].startswith("unchanged"), h
    assert "Prepare the node for the driver upgrade" not in out
    node = core_v1.read_node(name)
    assert not node.spec.unschedulable
    assert (node.metadata.labels or {}).get(STATE) == (node_before.metadata.labels or {}).get(STATE)
    assert versions(name) == before
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == OLD
