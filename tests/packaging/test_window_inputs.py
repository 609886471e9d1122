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
              "maintenance_max_failures"} - {extra.split("=")[0]}
    assert not any("%s must be" % o in out or "argument '%s'" % o in out for o in others), out[-3000:]
    assert not (tmp_path / "latest.json").exists()
