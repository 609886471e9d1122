"""scripts/stride-slices: the stride recipe's slice files (hosts[K::S] of the sorted hosts, plus
localhost) and its command lines, on a 7-host YAML inventory, checked against a hand-written answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "stride-slices"

# 7 hosts in an order that is not sorted, some in nested groups, some with no variables (absent
# from ansible-inventory's _meta.hostvars), one ungrouped
INVENTORY = """\
all:
  hosts:
    gpu-07:
  children:
    nvidia:
      hosts:
        gpu-03: {driver_upgrade_vendor: nvidia}
        gpu-01:
      children:
        nvidia_b:
          hosts:
            gpu-05:
            gpu-02: {driver_upgrade_vendor: nvidia}
    other:
      hosts:
        gpu-06:
        gpu-04:
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MAINTENANCE_RUN_ID="stride-test-1")
    # ansible-inventory of the virtualenv that runs the tests
    env["PATH"] = "%s%s%s" % (Path(sys.executable).parent, os.pathsep, env.get("PATH", ""))
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False, timeout=120)


def test_three_slices_of_seven_hosts(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    out = tmp_path / "slices"
    res = _run(str(inv), "3", str(out))
    assert res.returncode == 0, res.stderr

    # sorted: gpu-01 .. gpu-07; slice K = hosts[K::3], then localhost
    assert (out / "slice-0.txt").read_text() == "gpu-01\ngpu-04\ngpu-07\nlocalhost\n"
    assert (out / "slice-1.txt").read_text() == "gpu-02\ngpu-05\nlocalhost\n"
    assert (out / "slice-2.txt").read_text() == "gpu-03\ngpu-06\nlocalhost\n"
    assert sorted(p.name for p in out.iterdir()) == ["slice-0.txt", "slice-1.txt", "slice-2.txt"]

    lines = res.stdout.splitlines()
    assert lines == ["ansible-playbook npuops.fleet.maintenance_window -i %s -e maintenance_run_id=stride-test-1"
                     " -e maintenance_step=open" % inv] + [
        "ansible-playbook npuops.fleet.maintenance_window -i %s --limit @%s/slice-%d.txt"
        " -e maintenance_run_id=stride-test-1 -e maintenance_step=slice -e maintenance_rollout=rolling"
        " --forks 2" % (inv, out, k)  # no policy: width 1 (the GPU Operator's default), ceil(1 / 3) + 1
        for k in range(3)
    ] + ["ansible-playbook npuops.fleet.maintenance_window -i %s -e maintenance_run_id=stride-test-1"
         " -e maintenance_step=close" % inv]


def test_a_group_and_more_slices_than_hosts(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    out = tmp_path / "slices"
    # group nvidia (with its child nvidia_b): gpu-01, 02, 03, 05; 6 slices are cut to 4, one host each
    res = _run(str(inv), "6", str(out), "nvidia")
    assert res.returncode == 0, res.stderr
    assert [(out / ("slice-%d.txt" % k)).read_text() for k in range(4)] == [
        "gpu-01\nlocalhost\n", "gpu-02\nlocalhost\n", "gpu-03\nlocalhost\n", "gpu-05\nlocalhost\n"]
    assert not (out / "slice-4.txt").exists()
    lines = res.stdout.splitlines()
    assert len(lines) == 6 and all(line.endswith(" -e maintenance_hosts=nvidia") for line in lines)
    assert "maintenance_step=close" in lines[-1]


def test_an_unknown_group_is_refused(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    res = _run(str(inv), "2", str(tmp_path / "slices"), "amd")
    assert res.returncode != 0
    assert "no group 'amd'" in res.stderr


def test_the_slices_forks_share_the_smallest_width(tmp_path):
    inv = tmp_path / "hosts.yml"
    # widths "4" (a string) and 7: the window takes the smallest, 4; three slices get ceil(4 / 3) + 1 = 3 forks each
    inv.write_text("all:\n  children:\n    a:\n      hosts: {h1: , h2: , h3: }\n"
                   "      vars: {driver_upgrade_policy: {maxParallelUpgrades: '4'}}\n"
                   "    b:\n      hosts: {h4: }\n      vars: {driver_upgrade_policy: {maxParallelUpgrades: 7}}\n")
    res = _run(str(inv), "3", str(tmp_path / "slices"))
    assert res.returncode == 0, res.stderr
    slice_lines = [ln for ln in res.stdout.splitlines() if "maintenance_step=slice" in ln]
    assert len(slice_lines) == 3 and all(ln.endswith("maintenance_rollout=rolling --forks 3") for ln in slice_lines)
