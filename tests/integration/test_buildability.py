"""Whether the driver module can be built, decided on the lab hosts through playbooks/maintenance_window.yml.

- A host whose boot kernel has no headers (no ``/lib/modules/<k>/build``) is refused in the preflight,
  before any cordon, naming the kernel and the package; nothing on the host or the Node changes.
- A DKMS build that fails inside apt (the lab's dkms fails for a kernel the module cannot build for,
  with dkms's own lines and a make.log) stops the window before any reboot: the node ends
  ``upgrade-failed``, cordoned, the driver packages held, the reason names the kernel and the log, and
  the summary reports the vendor service that could not run again on the half-replaced userspace.

The simulated dkms (tests/lab/hosts/image/overlay/usr/sbin/dkms) checks the build tree as real dkms 3
does; the compile itself is what cannot exist here.
"""

from __future__ import annotations

import pytest

# the window's helpers, and its fixtures (kubeconfig, report_dir, restore) by import
from test_maintenance_window import (  # noqa: F401  # pylint: disable=unused-import
    GPU_STATE,
    N1,
    hx,
    kubeconfig,
    node,
    playbook,
    report_dir,
    restore,
    summary,
    world,
)

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

KERNEL = "5.15.0-107-generic"  # lab-node-1's kernel (tests/lab/hosts/hostctl.py DEFAULT_HOSTS)
HEADERS = f"linux-headers-{KERNEL}"


def held(name):
    out = hx(name, "dpkg --get-selections | awk '$2 == \"hold\" {print $1}'").stdout.split()
    return sorted(out)


def test_boot_kernel_without_headers_is_refused_before_any_cordon(kubeconfig, core_v1, coordination_v1, report_dir):  # noqa: F811
    assert hx(N1, f"readlink -f /lib/modules/{KERNEL}/build").stdout.strip() == f"/usr/src/{HEADERS}"
    hx(N1, f"apt-mark unhold {HEADERS} >/dev/null; dpkg -r {HEADERS} >/dev/null")
    try:
        before = world(core_v1, coordination_v1, (N1,))
        rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
        assert rc != 0, out[-4000:]
        s, hosts = summary(report_dir)
        h = hosts[N1]
        assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
        assert (
            f"kernel {KERNEL} has no build tree for DKMS (/lib/modules/{KERNEL}/build): install {HEADERS}"
            in h["reason"]
        ), h["reason"]
        assert "packaging ubuntu-server-open, dkms" in h["reason"], h["reason"]
        assert h["final_state"].startswith("unchanged"), h
        assert "Prepare the node for the driver upgrade" not in out
        assert world(core_v1, coordination_v1, (N1,)) == before
    finally:
        hx(N1, f"apt-get install -y -q {HEADERS} >/dev/null 2>&1 && apt-mark hold {HEADERS} >/dev/null")


def test_a_failed_dkms_build_stops_before_the_reboot(kubeconfig, core_v1, report_dir, restore):  # noqa: F811
    restore(N1)
    rc, out = playbook("harden.yml", kubeconfig, report_dir, N1, f"harden_hosts={N1}")
    assert rc == 0, out[-4000:]
    boot_before = hx(N1, "cat /run/npuops-lab/boot_id").stdout.strip()
    holds_before = held(N1)
    assert "nvidia-dkms-535-server-open" in holds_before, holds_before
    assert hx(N1, "systemctl is-active nvidia-persistenced", check=False).stdout.strip() == "active"
    hx(N1, f"touch /usr/src/{HEADERS}/npuops-lab-build-fails")

    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
    assert rc != 0, out[-4000:]
    s, hosts = summary(report_dir)
    h = hosts[N1]
    assert h["status"] == "failed" and h["failed_phase"] == "install", h
    log = "/var/lib/dkms/nvidia/550.90.07/build/make.log"
    assert f"DKMS module build failed for kernel {KERNEL}; see {log}" in h["reason"], h["reason"]
    assert h["rebooted"] is False and hx(N1, "cat /run/npuops-lab/boot_id").stdout.strip() == boot_before
    assert "implicit declaration of function" in hx(N1, f"cat {log}").stdout

    n = node(core_v1, N1)
    assert (n.metadata.labels or {}).get(GPU_STATE) == sm.UPGRADE_FAILED
    assert n.spec.unschedulable is True
    # The service was started again, and could not run: the transaction had replaced its 535 userspace
    # with 550's before the build failed, and the 550 daemon refuses the loaded 535 module (as the real
    # one does). The summary says so; the node stays cordoned for the operator.
    failed = {f["name"]: f["msg"] for f in h["restored"]["failed"] if f["kind"] == "service"}
    assert "systemctl start nvidia-persistenced" in failed.get("nvidia-persistenced", ""), h["restored"]
    # the driver stays held: what was held, and the half-configured new packages dpkg now has
    now = held(N1)
    still = [p for p in holds_before if "535" not in p or p in hx(N1, "dpkg-query -W -f='${Package}\\n'").stdout]
    assert set(still) <= set(now), (holds_before, now)
    assert {"nvidia-dkms-550-server-open", "nvidia-driver-550-server-open"} <= set(now), now
    status = hx(N1, "dpkg-query -W -f='${db:Status-Abbrev}' nvidia-dkms-550-server-open").stdout
    assert status[:2] == "hF", status  # held, half-configured: dpkg --configure -a would retry the build
