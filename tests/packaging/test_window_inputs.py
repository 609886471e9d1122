"""maintenance_window refuses a bad rollout variable before the Lease, naming that variable alone
(no cluster is needed: the check is the first play's, before any API call)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "extra,message",
    [
        # the role's argument spec (roles/maintenance_window/meta/argument_specs.yml, entry point open)
        ("maintenance_rollout=rollin", "value of maintenance_rollout must be one of: batches, rolling, got: rollin"),
        ("maintenance_mode=apply", "value of maintenance_mode must be one of: run, plan, got: apply"),
        (
            "maintenance_workload_compat=ignore",
            "value of maintenance_workload_compat must be one of: refuse, warn, skip, got: ignore",
        ),
        (
            "maintenance_max_failures=abc",
            "argument 'maintenance_max_failures' is of type str and we were unable to convert to int",
        ),
        # what a type cannot say: the role's own check
        ("maintenance_canary=-1", 'maintenance_canary must be a whole number >= 0, got "-1"; nothing was changed'),
        ("maintenance_lease_ttl=0", 'maintenance_lease_ttl must be a whole number of seconds >= 1, got "0"'),
        ("maintenance_admission_timeout=-5", 'maintenance_admission_timeout must be a whole number of seconds >= 0'),
        ("maintenance_preflight_max_age=-1", 'maintenance_preflight_max_age must be a whole number of seconds >= 0'),
        # a run id becomes a folder name: no path may leave the report directory
        (
            "maintenance_run_id=../x",
            'maintenance_run_id must be empty or letters digits . _ - (at most 63), got "../x"',
        ),
        ("maintenance_lease_name=Bad_Name", 'maintenance_lease_name must be a Kubernetes object name'),
        # an empty pattern would pass the "matches no host" check and end play 2 with the Lease held
        ("maintenance_hosts=", 'maintenance_hosts must be an inventory host pattern, got ""'),
        ("maintenance_step=slices",
         "value of maintenance_step must be one of: window, slice, open, close, got: slices"),
        ("maintenance_close_wait=-1", 'maintenance_close_wait must be a whole number of seconds >= 0'),
    ],
)
def test_a_bad_rollout_variable_is_named_alone(extra, message, tmp_path):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"), ANSIBLE_NOCOLOR="1")
    p = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            str(ROOT / "playbooks" / "maintenance_window.yml"),
            "-i",
            "localhost,",
            "-e",
            extra,
            "-e",
            "maintenance_report_dir=%s" % tmp_path,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    out = p.stdout + p.stderr
    assert p.returncode != 0 and message in out, out[-3000:]
    others = {"maintenance_rollout", "maintenance_mode", "maintenance_workload_compat", "maintenance_canary",
              "maintenance_max_failures", "maintenance_lease_ttl", "maintenance_admission_timeout",
              "maintenance_preflight_max_age", "maintenance_run_id", "maintenance_lease_name",
              "maintenance_hosts", "maintenance_step", "maintenance_close_wait"} - {extra.split("=")[0]}
    assert not any("%s must be" % o in out or "argument '%s'" % o in out for o in others), out[-3000:]
    assert not (tmp_path / "latest.json").exists()


def test_the_host_pattern_in_group_vars_all_is_the_one_the_preflight_takes(tmp_path):
    """maintenance_hosts set in group_vars/all: play 2 takes that pattern's hosts, not every host (a play's
    hosts keyword alone sees extra vars only). Plan mode; the preflight stops at the role's own input
    check (no target version), after the play has chosen its hosts."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("maintenance_hosts: chosen\n")
    (tmp_path / "inv").write_text("[chosen]\nh1\n[other]\nh2\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"), ANSIBLE_NOCOLOR="1",
               KUBECONFIG=str(tmp_path / "none"))
    p = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(ROOT / "playbooks" / "maintenance_window.yml"),
         "-i", str(tmp_path / "inv"), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable,
         "-e", "maintenance_mode=plan", "-e", "maintenance_report_dir=%s" % (tmp_path / "reports")],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )
    out = p.stdout + p.stderr
    preflight = out.split("PLAY [Maintenance window - fleet preflight")[1].split("PLAY [")[0]
    assert "[h1]" in preflight and "h2" not in preflight, out[-3000:]


@pytest.mark.parametrize("extra,message", [
    (("maintenance_step=slice",), 'maintenance_rollout must be rolling with maintenance_step=slice, got "batches"'),
    (("maintenance_step=slice", "maintenance_rollout=rolling", "maintenance_canary=1"),
     'maintenance_canary must be 0 with maintenance_step=slice'),
])
def test_a_slice_refuses_batches_and_a_canary_of_its_own(extra, message, tmp_path):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"), ANSIBLE_NOCOLOR="1")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(ROOT / "playbooks" / "maintenance_window.yml"),
           "-i", "localhost,", "-e", "maintenance_report_dir=%s" % tmp_path]
    for e in extra:
        cmd += ["-e", e]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and message in out, out[-3000:]
    assert not (tmp_path / "latest.json").exists()


def test_an_empty_slice_ends_before_the_window_and_changes_nothing(tmp_path):
    """An AWX slice with no host of maintenance_hosts: it says so and ends, rc 0, no Lease touched (no
    cluster here: any API call would fail the run)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"), ANSIBLE_NOCOLOR="1",
               KUBECONFIG=str(tmp_path / "no-such-kubeconfig"))
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(ROOT / "playbooks" / "maintenance_window.yml"),
           "-i", "localhost,", "-e", "maintenance_report_dir=%s" % tmp_path, "-e", "maintenance_step=slice",
           "-e", "maintenance_rollout=rolling", "-e", "maintenance_hosts=gpu_nodes", "-e", "maintenance_run_id=R1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "matches no host of this slice: nothing to do in window R1" in out, out[-3000:]
    assert "npu_upgrade_lease" not in out and not (tmp_path / "latest.json").exists()
