"""The execution environment (ee/): built here from the repo's files, it runs the maintenance window on
the lab through ansible-runner - the engine AWX runs job templates with - the way an AWX job does: the
project's one-line wrapper playbook, the Kubernetes credential injected as K8S_AUTH_KUBECONFIG (a
ServiceAccount bound to exactly the shipped RBAC), the summary back as the job's artifacts. The same
window from the virtualenv must end with the same report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_maintenance_window import COLLECTIONS, INVENTORY, N1, REPO, SCHEMA, hx, lab_dir, node, restore_host

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab
PODMAN = REPO / "tests" / "lab" / "hosts" / "bin" / "podman"
WRAPPER = "- name: Maintenance window\n  ansible.builtin.import_playbook: npuops.fleet.maintenance_window\n"


@pytest.fixture(scope="module")
def ee_image():
    """ee/build.py: the image of this tree (reused when its hash is built already)."""
    r = subprocess.run([sys.executable, str(REPO / "ee" / "build.py")], capture_output=True, text=True,
                       timeout=1500, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    return sa_kubeconfig(shipped=True)


def private_dir(base: Path, kubeconfig: str, report_dir: str, lab: str) -> Path:
    """An ansible-runner private data dir as AWX lays it out: project/ with the wrapper, env/ with the
    credential's environment and the job's extra variables."""
    (base / "project").mkdir(parents=True)
    (base / "env").mkdir()
    (base / "project" / "window.yml").write_text("---\n" + WRAPPER)
    (base / "env" / "envvars").write_text(json.dumps({
        "K8S_AUTH_KUBECONFIG": kubeconfig, "NPUOPS_LAB_DIR": lab, "ANSIBLE_NOCOLOR": "1"}))
    # npuops_fleet_kubeconfig: the lab inventory points it at the admin kubeconfig; an AWX inventory
    # leaves it unset, so the injected K8S_AUTH_KUBECONFIG is what the modules use.
    (base / "env" / "extravars").write_text(json.dumps({
        "maintenance_hosts": N1, "maintenance_report_dir": report_dir, "npuops_fleet_kubeconfig": None}))
    return base


def stats_artifacts(artifacts: Path) -> dict:
    """artifact_data of the playbook_on_stats event (what AWX keeps as the job's artifacts)."""
    events = [json.loads(p.read_text()) for p in sorted(artifacts.glob("*/job_events/*.json"))]
    (stats,) = [e for e in events if e.get("event") == "playbook_on_stats"]
    return stats["event_data"]["artifact_data"]


def essentials(summary: dict) -> dict:
    """What two runs of the same window must agree on (not run ids, times, boot ids or paths)."""
    keep = ("host", "node", "vendor", "status", "final_state", "reason", "target_version", "old_version",
            "new_version", "kernel_before", "kernel_after", "rebooted", "reboot_planned", "reboot_planned_why",
            "full_drain", "evicted", "waited_for", "devices_before", "devices_after")
    hosts = [
        {k: h.get(k) for k in keep}
        | {"phases": sorted(h.get("phases", {})), "same_machine": (h.get("identity") or {}).get("same")}
        for h in summary["hosts"]
    ]
    top = {k: summary.get(k) for k in ("schema_version", "kind", "result", "batch_size", "batches", "counts")}
    return top | {"hosts": hosts}


def test_window_from_the_execution_environment_matches_the_virtualenv_run(
    ee_image, kubeconfig, core_v1, tmp_path
):
    version = subprocess.run([str(PODMAN), "run", "--rm", ee_image, "sh", "-c",
                              "python3 --version; ansible --version | head -1; ansible-galaxy collection list"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    assert "Python 3.13" in version and "core 2.21" in version, version
    for c in ("npuops.fleet", "kubernetes.core", "community.general"):
        assert c in version, version

    # AWX runs the image as uid 1000, OpenShift as an arbitrary uid in group 0: both get a user (ssh
    # needs one) and a writable HOME (--passwd=false: podman adds no passwd entry, the image must)
    for user in ("1000", "1000680000:0"):
        who = subprocess.run([str(PODMAN), "run", "--rm", "--passwd=false", "--user", user, ee_image, "sh", "-c",
                              "whoami && touch $HOME/.probe && ansible-runner --version"],
                             capture_output=True, text=True, timeout=120, check=False)
        assert who.returncode == 0 and who.stdout.split()[0] == "runner", (user, who.stdout, who.stderr)

    restore_host(core_v1, N1)
    try:
        window_from_the_ee_and_the_venv(ee_image, kubeconfig, core_v1, tmp_path)
    finally:
        restore_host(core_v1, N1)


def window_from_the_ee_and_the_venv(ee_image, kubeconfig, core_v1, tmp_path):
    import ansible_runner
    import jsonschema

    # Everything the job needs is in its private data dir, owned by the job's uid, as AWX injects it:
    # the kubeconfig (the credential's file), the lab's SSH key and port map (the machine credential).
    ee = private_dir(tmp_path / "ee", "/runner/kubeconfig", "/runner/reports", "/runner/lab")
    shutil.copy(kubeconfig, ee / "kubeconfig")
    (ee / "lab" / "ssh").mkdir(parents=True)
    for f in ("id_ed25519", "ports.json"):
        shutil.copy(lab_dir() / "ssh" / f, ee / "lab" / "ssh" / f)
    subprocess.run(["chown", "-R", "1000:0", str(ee)], check=True)
    cmd = [str(PODMAN), "run", "--rm", "--network", "host", "-v", "%s:/runner" % ee,
           "-v", "%s:/runner/inventory:ro" % INVENTORY, ee_image,
           "ansible-runner", "run", "/runner", "-p", "window.yml"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    from_ee = stats_artifacts(ee / "artifacts")["npuops_fleet_summary"]
    jsonschema.Draft202012Validator(SCHEMA).validate(from_ee)
    assert from_ee == json.loads((ee / "reports" / "latest.json").read_text())
    (h,) = from_ee["hosts"]
    assert (h["status"], h["old_version"], h["new_version"], h["final_state"]) == (
        "upgraded", "535.183.06", "550.90.07", sm.UPGRADE_DONE), h
    assert hx(N1, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()[0] == "550.90.07"
    assert not node(core_v1, N1).spec.unschedulable

    restore_host(core_v1, N1)
    venv = private_dir(tmp_path / "venv", kubeconfig, str(tmp_path / "venv" / "reports"), str(lab_dir()))
    (venv / "inventory").symlink_to(INVENTORY)
    r = ansible_runner.run(private_data_dir=str(venv), playbook="window.yml", quiet=True, timeout=1500,
                           envvars=dict(json.loads((venv / "env" / "envvars").read_text()),
                                        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS)))
    assert (r.status, r.rc) == ("successful", 0), r.stdout.read()[-6000:]
    from_venv = stats_artifacts(venv / "artifacts")["npuops_fleet_summary"]
    assert essentials(from_ee) == essentials(from_venv)
    assert os.path.exists(venv / "reports" / "latest-chat.txt") and (ee / "reports" / "latest-chat.txt").exists()


def test_two_runner_slices_in_the_execution_environment_share_one_window(ee_image, kubeconfig, core_v1, tmp_path):
    """Two ansible-runner processes in the image as two slices of one AWX workflow launch (the run id
    from awx_workflow_job_id, each job its own awx_job_id), then the close step: one window, both hosts."""
    import ansible_runner
    from test_maintenance_window import N0

    wf = "9%05d" % (os.getpid() % 100000)
    for n in (N0, N1):
        restore_host(core_v1, n)
    try:
        procs = []
        for job, host in ((1, N0), (2, N1)):
            d = private_dir(tmp_path / ("slice%d" % job), "/runner/kubeconfig", "/runner/reports", "/runner/lab")
            (d / "env" / "extravars").write_text(json.dumps({
                "maintenance_hosts": host, "maintenance_report_dir": "/runner/reports", "npuops_fleet_kubeconfig": None,
                "maintenance_step": "slice", "maintenance_rollout": "rolling", "awx_workflow_job_id": wf,
                "awx_job_id": job}))
            # a rolling slice's forks are its lanes: at most the width + 1 (the job template's forks)
            env = json.loads((d / "env" / "envvars").read_text())
            (d / "env" / "envvars").write_text(json.dumps(dict(env, ANSIBLE_FORKS="2")))
            shutil.copy(kubeconfig, d / "kubeconfig")
            (d / "lab" / "ssh").mkdir(parents=True)
            for f in ("id_ed25519", "ports.json"):
                shutil.copy(lab_dir() / "ssh" / f, d / "lab" / "ssh" / f)
            subprocess.run(["chown", "-R", "1000:0", str(d)], check=True)
            procs.append((d, subprocess.Popen(
                [str(PODMAN), "run", "--rm", "--network", "host", "-v", "%s:/runner" % d,
                 "-v", "%s:/runner/inventory:ro" % INVENTORY, ee_image, "ansible-runner", "run", "/runner", "-p",
                 "window.yml"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        for d, p in procs:
            out = p.communicate(timeout=1500)[0]
            assert p.returncode == 0, out[-6000:]
            s = stats_artifacts(d / "artifacts")["npuops_fleet_summary"]
            assert s["run_id"] == "awx-wf-" + wf and s["result"] == "ok", s
        # the close step (not sliced) from the virtualenv, as the workflow's last job
        close = private_dir(tmp_path / "close", kubeconfig, str(tmp_path / "close" / "reports"), str(lab_dir()))
        (close / "env" / "extravars").write_text(json.dumps({
            "maintenance_hosts": "localhost", "maintenance_report_dir": str(tmp_path / "close" / "reports"),
            "npuops_fleet_kubeconfig": None, "maintenance_step": "close", "awx_workflow_job_id": wf,
            "awx_job_id": 3}))
        (close / "inventory").symlink_to(INVENTORY)
        r = ansible_runner.run(private_data_dir=str(close), playbook="window.yml", quiet=True, timeout=900,
                               envvars=dict(json.loads((close / "env" / "envvars").read_text()),
                                            ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS)))
        assert (r.status, r.rc) == ("successful", 0), r.stdout.read()[-6000:]
        window = stats_artifacts(close / "artifacts")["npuops_fleet_window"]
        rows = {h["host"]: h for h in window["hosts"]}
        assert window["closed"] and window["run_id"] == "awx-wf-" + wf, window
        assert {rows[n]["status"] for n in (N0, N1)} == {"upgraded"}, rows
        assert set(window["window"]["failures"]) == set() and window["window"]["state"] == "closed", window["window"]
    finally:
        # a window this test left open (a failure before its close step) must not refuse the next test's
        from kubernetes import client

        coord = client.CoordinationV1Api(core_v1.api_client)
        try:
            lease = coord.read_namespaced_lease("npuops-fleet-maintenance-window", "kube-system")
            if lease.spec.holder_identity == "awx-wf-" + wf:
                coord.delete_namespaced_lease("npuops-fleet-maintenance-window", "kube-system")
        except client.ApiException as e:
            if e.status != 404:
                raise
        for n in (N0, N1):
            restore_host(core_v1, n)
