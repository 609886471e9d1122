"""Fixtures for tests against the lab cluster (tests/lab, `make lab-up`).

Lab tests (marker `lab`) skip when the lab is not reachable, or FAIL when NPUOPS_REQUIRE_LAB=1
(CI / `make test`: a missing lab must not pass silently)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import rotation
import yaml
from labhelpers import WINDOW_LEASE, shipped_rbac

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "tests" / "lab"
sys.path.insert(0, str(LAB))  # `from lablib import nodes`

LAB_DIR = Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))
NAMESPACE = "gpu-drv"


def _kubeconfig_path():
    return os.environ.get("KUBECONFIG") or str(LAB_DIR / "kubeconfig")


@pytest.fixture(scope="session")
def lab_kubeconfig():
    """Path of the admin kubeconfig of a reachable lab; skip/fail otherwise."""
    path = _kubeconfig_path()
    why = None
    try:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=path)
        client.VersionApi(api).get_code(_request_timeout=5)
        # Guard: never run these create/drain tests against a cluster that is not the lab.
        if not client.CoreV1Api(api).list_node(label_selector="type=kwok", limit=1, _request_timeout=5).items:
            raise RuntimeError("cluster has no type=kwok nodes, so it is not the lab")
        api.close()
    except Exception as e:  # noqa: BLE001 - any failure means "no lab"
        why = f"lab not reachable via {path}: {type(e).__name__}: {str(e)[:200]} (run `make lab-up`)"
    if why:
        if os.environ.get("NPUOPS_REQUIRE_LAB") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def api_client(lab_kubeconfig):
    from kubernetes import config

    api = config.new_client_from_config(config_file=lab_kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="session")
def core_v1(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def apps_v1(api_client):
    from kubernetes import client

    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def policy_v1(api_client):
    from kubernetes import client

    return client.PolicyV1Api(api_client)


@pytest.fixture(scope="session")
def coordination_v1(api_client):
    from kubernetes import client

    return client.CoordinationV1Api(api_client)


@pytest.fixture(scope="session")
def rbac_v1(api_client):
    from kubernetes import client

    return client.RbacAuthorizationV1Api(api_client)


@pytest.fixture(scope="session")
def lab_scenario():
    """The scenario the running lab was started with (falls back to the repo default)."""
    p = LAB_DIR / "scenario.yaml"
    return yaml.safe_load((p if p.exists() else LAB / "scenario.yaml").read_text())


@pytest.fixture(scope="session")
def kubectl_bin():
    """The kubectl built for the lab's release (the machine's may be older), else PATH's."""
    try:
        return json.loads((LAB_DIR / "bins.json").read_text())["kubectl"]
    except (OSError, ValueError, KeyError):
        return shutil.which("kubectl") or "kubectl"


@pytest.fixture(scope="session")
def kubectl(lab_kubeconfig, kubectl_bin):
    """kubectl(*args, kubeconfig=None, check=True) -> CompletedProcess (text, captured)."""

    def run(*args, kubeconfig=None, check=True, timeout=120):
        cmd = [kubectl_bin, f"--kubeconfig={kubeconfig or lab_kubeconfig}", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)

    return run


def _sa_kubeconfig(api_client, name, namespace, token):
    c = api_client.configuration
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [
            {"name": "lab", "cluster": {"server": c.host, "certificate-authority-data": _ca_data(c)}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "lab", "user": name, "namespace": namespace}}],
    }
    return cfg


def _ca_data(c):
    import base64

    return base64.b64encode(Path(c.ssl_ca_cert).read_bytes()).decode()


@pytest.fixture
def sa_kubeconfig(api_client, core_v1, rbac_v1, tmp_path):
    """Factory: kubeconfig (path) for a fresh ServiceAccount bound to RBAC rules.

    sa_kubeconfig(shipped=True)                                      # exactly deploy/rbac/*.yaml
    sa_kubeconfig(shipped=True, window_leases=["x"])                 # ... with Lease x for the window's
    sa_kubeconfig(shipped=True, without_api_groups=["apps"])         # ... an older ClusterRole, without apps
    sa_kubeconfig(cluster_role="npuops-fleet")                       # bind an existing role
    sa_kubeconfig(rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}])
    Creates SA in `namespace` (default gpu-drv), a ClusterRoleBinding (and the ClusterRole when
    `rules` is given; with `shipped`, a copy of each shipped ClusterRole and Role under a test name,
    each bound in its own namespace), and a 1 h token from the TokenRequest API; all removed at teardown."""
    from kubernetes import client

    made = []

    def bind_cluster_role(sa, namespace, cluster_role, name):
        rbac_v1.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            }
        )
        made.append(("crb", name))

    def make(cluster_role=None, rules=None, namespace=NAMESPACE, shipped=False, window_leases=None,
             without_api_groups=()):
        sfx = uuid.uuid4().hex[:6]
        sa = f"lab-sa-{sfx}"
        core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
        made.append(("sa", (namespace, sa)))
        if shipped:
            for i, doc in enumerate(shipped_rbac()):
                name = f"lab-{sfx}-{i}-{doc['metadata']['name']}"
                if doc["kind"] == "ClusterRole":
                    kept = [r for r in doc["rules"] if not set(r.get("apiGroups") or []) & set(without_api_groups)]
                    rbac_v1.create_cluster_role({"metadata": {"name": name}, "rules": kept})
                    made.append(("role", name))
                    bind_cluster_role(sa, namespace, name, name)
                    continue
                assert doc["kind"] == "Role", doc["kind"]
                ns = doc["metadata"]["namespace"]
                rules_ = doc["rules"]
                if window_leases:  # a test's own window Lease names, as a custom maintenance_lease_name
                    rules_ = [dict(r, resourceNames=[n for n in r["resourceNames"] if n != WINDOW_LEASE]
                                   + list(window_leases)) if WINDOW_LEASE in r.get("resourceNames", []) else r
                              for r in rules_]
                rbac_v1.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules_})
                made.append(("nsrole", (ns, name)))
                rbac_v1.create_namespaced_role_binding(ns, {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
                })
                made.append(("rb", (ns, name)))
        else:
            if rules is not None:
                cluster_role = cluster_role or f"lab-role-{sfx}"
                rbac_v1.create_cluster_role({"metadata": {"name": cluster_role}, "rules": rules})
                made.append(("role", cluster_role))
            bind_cluster_role(sa, namespace, cluster_role, sa)
        tr = core_v1.create_namespaced_service_account_token(
            sa, namespace, client.AuthenticationV1TokenRequest(spec={"expirationSeconds": 3600})
        )
        path = tmp_path / f"{sa}.kubeconfig"
        path.write_text(yaml.safe_dump(_sa_kubeconfig(api_client, sa, namespace, tr.status.token)))
        path.chmod(0o600)
        return str(path)

    yield make
    for kind, what in reversed(made):
        try:
            if kind == "role":
                rbac_v1.delete_cluster_role(what)
            elif kind == "crb":
                rbac_v1.delete_cluster_role_binding(what)
            elif kind == "nsrole":
                rbac_v1.delete_namespaced_role(what[1], what[0])
            elif kind == "rb":
                rbac_v1.delete_namespaced_role_binding(what[1], what[0])
            else:
                core_v1.delete_namespaced_service_account(what[1], what[0])
        except client.ApiException as e:
            if e.status != 404:
                raise


REALPKG_FILE = "test_realpkg.py"


def _realpkg_cached(dset: str) -> bool:
    """Its host image is in podman's store (tests/lab/realpkg/image.py --cached: nothing is built)."""
    r = subprocess.run([sys.executable, str(LAB / "realpkg" / "image.py"), "--set", dset, "--cached"],
                       capture_output=True, text=True, check=False, timeout=120)
    return r.returncode == 0


def _realpkg_pick(items, record, counter):
    """NPUOPS_REALPKG=auto (`make test`): one real-package test of those whose image is cached, the one
    run least recently (one a run, so a failing one cannot starve the others), when the run has budget
    left: collected (and so started:
    it runs first) less than NPUOPS_REALPKG_START_BY seconds (default 2700) after `make test` began
    (NPUOPS_TEST_T0, set by scripts/test.sh), since each takes 4-9 minutes with its real DKMS build.
    -> (kept items, one line saying why)."""
    if not items:
        return [], "no real-package tests collected"
    t0 = float(os.environ.get("NPUOPS_TEST_T0") or time.time())
    start_by = float(os.environ.get("NPUOPS_REALPKG_START_BY") or 2700)
    if time.time() - t0 > start_by:
        return [], "real packages: none, %.0f s into make test (start by %.0f s)" % (time.time() - t0, start_by)
    sets = {it.nodeid: (it.get_closest_marker("realpkg_set").args[0] if it.get_closest_marker("realpkg_set")
                        else "before") for it in items}
    cached = {s: _realpkg_cached(s) for s in sorted(set(sets.values()))}
    eligible = [it for it in items if cached[sets[it.nodeid]]]
    if not eligible:
        return [], "real packages: none, no image cached (sets %s; `make realpkg-lab` builds one)" % ", ".join(cached)
    (pick,) = rotation.stalest([it.nodeid for it in eligible], 1, record.get("lab") or {}, counter)
    return [it for it in eligible if it.nodeid == pick], "real packages: %s (set %s cached)" % (pick, sets[pick])


def _whole_suite(config) -> bool:
    """The session collected all of tests/integration (no file or node id named): only such a run
    may count as an attempt of its slot or replace the list of known lab tests."""
    here = Path(__file__).resolve().parent
    args = [Path(str(a).partition("::")[0]).resolve() for a in config.args]
    args = args or [Path(str(config.invocation_params.dir))]
    return all(a == here or here.is_relative_to(a) for a in args)


def pytest_collection_modifyitems(config, items):
    """`make test` runs one rotation of the lab tests (NPUOPS_IT_ROTATION=3, set by the Makefile; see
    rotation.py): a test's slot is sha256(salt + node id) % N; the run takes the slot attempted least
    recently on this machine (its record), NPUOPS_IT_SEED=r slot r, plus every test whose last
    outcome there was a failure or an error. Unset or 1: all (`make integration`). The real-package
    tests (test_realpkg.py) are outside the slots: all with NPUOPS_REALPKG=1 (`make test-realpkg`), one
    whose image is cached with NPUOPS_REALPKG=auto (`make test`, run first so that its budget check
    holds), none otherwise. Tests are independent (each puts its hosts and Nodes back)."""
    n = int(os.environ.get("NPUOPS_IT_ROTATION") or 1)
    mode = os.environ.get("NPUOPS_REALPKG") or ""
    real = [it for it in items if it.nodeid.partition("::")[0].endswith(REALPKG_FILE)]
    rest = [it for it in items if it not in real]
    record = rotation.load()
    counter = rotation.counter_now()
    lines = []
    r = None
    if n <= 1:
        keep, label = list(rest), "all"
        lines.append("lab tests: all %d (NPUOPS_IT_ROTATION unset or 1)" % len(rest))
    else:
        seed = os.environ.get("NPUOPS_IT_SEED")
        if seed not in (None, ""):
            r, why = int(seed) % n, "NPUOPS_IT_SEED=%s" % seed
        else:
            slot_runs = (record.get("slots") or {}).get(str(n)) or {}
            r = rotation.choose(n, {rotation.slot(it.nodeid, n) for it in rest}, slot_runs, counter)
            why = "the slot attempted least recently on this machine: %s (record %s)" % (
                rotation.now_iso(float(slot_runs[str(r)])) if str(r) in slot_runs else "never",
                rotation.record_path())
        again = set(rotation.failing(record.get("lab") or {}))
        keep = [it for it in rest if rotation.slot(it.nodeid, n) == r or it.nodeid in again]
        label = "%d/%d" % (r, n)
        repeated = sum(1 for it in keep if rotation.slot(it.nodeid, n) != r)
        lines.append("lab tests: rotation %s, %d of %d (%s)%s; NPUOPS_IT_SEED=%d repeats it"
                     % (label, len(keep), len(rest), why,
                        ", %d of them from other slots as they failed last" % repeated if repeated else "", r))
    if mode == "1":
        kept_real, why_real = real, "real packages: all %d (NPUOPS_REALPKG=1)" % len(real)
    elif mode == "auto":
        kept_real, why_real = _realpkg_pick(real, record, counter)
    else:
        kept_real, why_real = [], "real packages: none (NPUOPS_REALPKG unset; make test-realpkg runs them)"
    lines.append(why_real)
    keep = kept_real + keep
    lines += ["  " + it.nodeid for it in keep]
    slotted = {it.nodeid for it in keep if it not in kept_real}
    config._npuops_rotation = {"label": label, "n": n, "slot": r if slotted else None, "lines": lines,
                               "commit": rotation.head(), "whole": _whole_suite(config),
                               "lab_ids": sorted(it.nodeid for it in rest)}
    drop = [it for it in items if it not in keep]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    sel = REPO / "build" / "test-rotation.txt"
    sel.parent.mkdir(parents=True, exist_ok=True)
    sel.write_text("\n".join(lines) + "\n")


def pytest_report_collectionfinish(config, start_path, items):
    info = getattr(config, "_npuops_rotation", None)
    return info["lines"] if info else []


_OUTCOMES: dict[str, str] = {}  # node id -> passed / failed / skipped / error, for the record
_RECORDING: dict = {}  # on: whether this session writes the record; info: the rotation it runs


def _recording(config) -> bool:
    return getattr(config, "_npuops_rotation", None) is not None and os.environ.get("NPUOPS_REQUIRE_LAB") == "1"


def pytest_runtest_logreport(report):
    """Outcome per lab test: a failure in setup is an error (the test body never ran), in the call or
    teardown a failure; a skip is a skip; else passed after the call. Saved to the record as soon as
    the test's teardown ends, so a run killed later keeps what it did."""
    if report.failed:
        _OUTCOMES[report.nodeid] = "error" if report.when == "setup" else "failed"
    elif report.skipped:
        _OUTCOMES.setdefault(report.nodeid, "skipped")
    elif report.when == "call":
        _OUTCOMES.setdefault(report.nodeid, "passed")
    if report.when == "teardown" and _RECORDING.get("on") and report.nodeid in _OUTCOMES:
        info = _RECORDING["info"]
        with rotation.updating() as data:
            rotation.note_result(data, "lab", report.nodeid, _OUTCOMES[report.nodeid], time.time(),
                                 info["commit"], info["label"])


def pytest_collection_finish(session):
    _RECORDING.update(on=_recording(session.config), info=getattr(session.config, "_npuops_rotation", None))


def pytest_sessionfinish(session, exitstatus):
    """Complete the record: the run's line; the slot's attempt when a whole-suite session ran it to its
    end (not interrupted); the collected ids; then tests/integration/last-rotations.md."""
    info = getattr(session.config, "_npuops_rotation", None)
    if not _recording(session.config) or not _OUTCOMES:
        return
    now = time.time()
    ran = dict(_OUTCOMES)
    attempted = (info["slot"] is not None and info["whole"]
                 and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED))
    with rotation.updating() as data:
        if info["whole"]:
            data["lab_ids"] = info["lab_ids"]
        if attempted:
            rotation.note_slot(data, info["n"], info["slot"], now)
        uncounted = "" if attempted or info["slot"] is None else " (not counted: a part or interrupted)"
        rotation.note_run(data, {"when": rotation.now_iso(now), "kind": "lab", "rotation": info["label"] + uncounted,
                                 "commit": info["commit"], "ran": sum(v in ("passed", "failed") for v in ran.values()),
                                 "passed": sum(v == "passed" for v in ran.values()),
                                 "failed": sum(v in ("failed", "error") for v in ran.values())})
        rendered = rotation.render(data, info["n"] if info["n"] > 1 else 3)
    (REPO / "tests" / "integration" / "last-rotations.md").write_text(rendered)
