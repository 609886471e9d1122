"""roles/driver_drift_monitor on lab hosts with the real Debian prometheus-node-exporter: the metrics
scraped from node_exporter's HTTP endpoint follow the domain.md incident (unattended-upgrades replaces
the userspace under the loaded module) and its fix (reboot); the role is idempotent and check mode
changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from labhelpers import container
from test_lab_hosts import K_NEW, K_OLD, V_NEW, V_OLD, hostctl, hx, lab_dir  # the lab host helpers

REPO = Path(__file__).resolve().parents[2]
HOSTCTL = REPO / "tests" / "lab" / "hosts" / "hostctl"

pytestmark = pytest.mark.lab


INTERVAL = 10
MARGIN = 20  # the check's own run time plus node_exporter's read; no timing is asserted beyond it
SCRAPE = "python3 -c 'import urllib.request;print(urllib.request.urlopen(\"http://127.0.0.1:9100/metrics\").read().decode())'"


def reboot(name):
    cname = container(name)
    before = hx(cname, "cut -d' ' -f22 /proc/1/stat").stdout.strip()
    hx(cname, "systemctl reboot", check=False)
    hostctl("wait-boot", name, "--after", before, "--timeout", "120")


@pytest.fixture
def scratch(lab_kubeconfig):
    made = []

    def spawn(kernel=None, driver=None):
        name = f"scratch-{uuid.uuid4().hex[:6]}"
        args = ["spawn", name, "--devices", "2"]
        if kernel:
            args += ["--kernel", kernel]
        if driver:
            args += ["--driver", driver]
        made.append(name)
        return name, hostctl(*args).splitlines()[-1]

    yield spawn
    for name in made:
        subprocess.run([str(HOSTCTL), "rm", name], capture_output=True,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)


def playbook(name, tmp_path, *args, timeout=300):
    """playbooks/drift_monitor.yml on the scratch host NAME (inventories/lab + a one-host inventory)."""
    inv = tmp_path / "scratch.yml"
    inv.write_text(f"all:\n  hosts:\n    {name}:\n")
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    env.update(NPUOPS_LAB_DIR=str(lab_dir()), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "build" / "collections"))
    r = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(REPO / "inventories" / "lab"),
                        "-i", str(inv), "-l", name, str(REPO / "playbooks" / "drift_monitor.yml"), *args],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    m = re.search(r"^%s\s*:.*changed=(\d+)" % re.escape(name), out, re.M)
    assert m, out[-3000:]
    return int(m.group(1)), out


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def norm(series):
    """``name{labels}`` with the labels sorted by name, as node_exporter writes them."""
    name, _brace, rest = series.partition("{")
    if not rest:
        return name
    return name + "{" + ",".join('%s="%s"' % kv for kv in sorted(LABEL.findall(rest))) + "}"


class Scrape(dict):
    """{series: value} whose keys are compared in :func:`norm` form."""

    def __getitem__(self, key):
        return dict.__getitem__(self, norm(key))

    def get(self, key, default=None):
        return dict.get(self, norm(key), default)


def scrape(container):
    """node_exporter's /metrics as a :class:`Scrape`."""
    res = Scrape()
    for line in hx(container, SCRAPE).stdout.splitlines():
        if line and not line.startswith("#"):
            series, _space, value = line.rpartition(" ")
            res[norm(series)] = value
    return res


def wait_metrics(container, expected, timeout):
    """Poll the scrape until every series of ``expected`` has its value; returns the last scrape."""
    t0 = time.monotonic()
    while True:
        got = scrape(container)
        if all(got.get(k) == v for k, v in expected.items()):
            return got
        if time.monotonic() - t0 > timeout:
            drift = {k: v for k, v in got.items() if k.startswith("npu_driver_")}
            raise AssertionError(f"after {timeout}s: want {expected}\ngot {drift}")
        time.sleep(1)


def info(source, version, kernel):
    return f'npu_driver_version_info{{vendor="nvidia",source="{source}",version="{version}",kernel="{kernel}"}}'


def test_incident_turns_the_mismatch_gauge_on_and_the_reboot_off(scratch, tmp_path):
    name, c = scratch(kernel=K_OLD, driver=V_OLD)
    # the kernel from the linux-generic meta package, as on the incident's workers
    hx(c, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-generic=5.15.0.177.161 "
          "linux-image-generic=5.15.0.177.161 linux-headers-generic=5.15.0.177.161")
    assert hx(c, "systemctl is-active prometheus-node-exporter").stdout.strip() == "active"
    changed, _out = playbook(name, tmp_path, "-e", f"driver_drift_monitor_interval={INTERVAL}",
                             "-e", "driver_drift_monitor_kube_proxy_mode=ipvs")
    assert changed > 0
    got = wait_metrics(c, {
        'npu_driver_mismatch{verdict="ok"}': "0",
        "npu_driver_drift_check_success": "1",
    }, INTERVAL + MARGIN)
    assert got[info("loaded", V_OLD, K_OLD)] == "1"
    assert got[info("userspace", V_OLD, "")] == "1"
    assert got[info("on_disk_boot", V_OLD, K_OLD)] == "1"
    assert got['npu_driver_verdict{verdict="ok"}'] == "1"
    assert got["npu_driver_reboot_pending"] == "0"
    assert got['npu_driver_package_held{package="nvidia-utils-580-server",kind="driver"}'] == "0"
    assert got["npu_driver_ipvs_required"] == "1"
    assert got[f'npu_driver_ipvs_loadable{{kernel="{K_OLD}",module="ip_vs"}}'] == "1"
    assert got["npu_driver_drift_check_interval_seconds"] == str(INTERVAL)
    assert got['node_textfile_scrape_error'] == "0"

    hx(c, "unattended-upgrade")
    assert hx(c, "nvidia-smi", check=False).returncode == 18  # NVML mismatch, as in the incident
    got = wait_metrics(c, {'npu_driver_mismatch{verdict="reload_required"}': "1"}, INTERVAL + MARGIN)
    assert got[info("loaded", V_OLD, K_OLD)] == "1"
    assert got[info("on_disk_boot", V_NEW, K_NEW)] == "1"
    assert got["npu_driver_reboot_pending"] == "1"
    assert got[f'npu_driver_reboot_changes_driver{{kernel="{K_NEW}"}}'] == "1"
    # the new kernel's module index is stale (case C7): known before the reboot, not after it
    assert got[f'npu_driver_ipvs_loadable{{kernel="{K_NEW}",module="ip_vs"}}'] == "0"
    assert not any(k.startswith('npu_driver_mismatch{verdict="ok"}') for k in got)

    reboot(name)
    got = wait_metrics(c, {'npu_driver_mismatch{verdict="ok"}': "0", "npu_driver_drift_check_success": "1",
                           "npu_driver_reboot_pending": "0"}, INTERVAL + MARGIN)
    assert got[info("loaded", V_NEW, K_NEW)] == "1"
    hx(c, f"depmod -a {K_NEW}")
    wait_metrics(c, {f'npu_driver_ipvs_loadable{{kernel="{K_NEW}",module="ip_vs"}}': "1"}, INTERVAL + MARGIN)


def test_idempotent_and_check_mode_changes_nothing(scratch, tmp_path):
    name, c = scratch(kernel=K_OLD, driver=V_OLD)
    args = ("-e", f"driver_drift_monitor_interval={INTERVAL}")
    absent = "test ! -e /usr/local/lib/npuops-drift && test ! -e /etc/systemd/system/npu-driver-drift.timer"
    changed, _out = playbook(name, tmp_path, "--check", *args)
    assert changed > 0
    hx(c, absent + " && test ! -e /var/lib/prometheus/node-exporter/npu_driver_drift.prom")
    changed, _out = playbook(name, tmp_path, *args)
    assert changed > 0
    assert hx(c, "systemctl is-enabled npu-driver-drift.timer").stdout.strip() == "enabled"
    wait_metrics(c, {"npu_driver_drift_check_success": "1"}, INTERVAL + MARGIN)
    changed, out = playbook(name, tmp_path, *args)
    assert changed == 0, out[-4000:]
    changed, out = playbook(name, tmp_path, "--check", *args)
    assert changed == 0, out[-4000:]
    # a changed interval is a change in check mode, and check mode leaves the timer as it was
    changed, _out = playbook(name, tmp_path, "--check", "-e", "driver_drift_monitor_interval=60")
    assert changed > 0
    assert f"OnUnitActiveSec={INTERVAL}s" in hx(c, "cat /etc/systemd/system/npu-driver-drift.timer").stdout
    changed, _out = playbook(name, tmp_path, "-e", "driver_drift_monitor_state=absent")
    assert changed > 0
    hx(c, absent + " && test ! -e /var/lib/prometheus/node-exporter/npu_driver_drift.prom")
