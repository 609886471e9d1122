"""Run collection modules the way Ansible does (ansible-playbook + the JSON callback), for lab tests.

``run_tasks(tasks, kubeconfig, check=False)`` writes a one-play playbook on localhost and returns the
per-task results of localhost (``failed``, ``msg``, module return values) in task order. Going through
ansible-playbook exercises the real argument spec, module_utils packaging and fail_json paths.

The modules find the cluster through ``K8S_AUTH_KUBECONFIG=kubeconfig``. ``kubeconfig=None`` leaves it
unset (also when this process has it), and ``env`` adds variables (a value of None unsets one), for
tests of the other credential sources such as ``KUBECONFIG``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional

import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "build" / "collections"


def _ensure_link() -> None:
    link = COLLECTIONS / "ansible_collections" / "npuops" / "fleet"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REPO)


def run_tasks(
    tasks: list[dict],
    kubeconfig: Optional[str],
    check: bool = False,
    timeout: int = 300,
    env: Optional[Mapping[str, Optional[str]]] = None,
) -> list[dict]:
    _ensure_link()
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": tasks}]
    with tempfile.TemporaryDirectory(prefix="npuops-it-") as tmp:
        pb = Path(tmp) / "play.yml"
        pb.write_text(yaml.safe_dump(play, sort_keys=False))
        proc_env = dict(os.environ)
        proc_env.update(
            ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_LOCALHOST_WARNING="False",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_NOCOLOR="1",
        )
        if kubeconfig is None:
            proc_env.pop("K8S_AUTH_KUBECONFIG", None)
        else:
            proc_env["K8S_AUTH_KUBECONFIG"] = kubeconfig
        for key, value in (env or {}).items():
            if value is None:
                proc_env.pop(key, None)
            else:
                proc_env[key] = value
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(pb)]
        if check:
            cmd.append("--check")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=proc_env, timeout=timeout, cwd=tmp,
                              check=False)
    try:
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError as exc:
        raise AssertionError("ansible-playbook output is not JSON (rc=%s):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])) from exc
    results = []
    for task in out["plays"][0]["tasks"]:
        results.append(task["hosts"]["localhost"])
    return results


def run_module(
    module: str,
    args: dict,
    kubeconfig: Optional[str],
    check: bool = False,
    env: Optional[Mapping[str, Optional[str]]] = None,
) -> dict:
    """One task of ``npuops.fleet.<module>``; the task may fail (result has ``failed: true``)."""
    task = {"name": module, "npuops.fleet." + module: args, "ignore_errors": True}
    return run_tasks([task], kubeconfig, check=check, env=env)[0]
