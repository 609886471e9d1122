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


def pytest_collection_modifyitems(config, items):
    """`make test` runs a rotating third of the lab tests (NPUOPS_IT_ROTATION=3, set by the Makefile):
    item i runs when i % N == seed % N, seed NPUOPS_IT_SEED (default: days since the epoch), so three
    consecutive CI runs cover every test and each module's cost is split evenly. Unset or 1: all
    (`make integration`). Tests are independent (each puts its hosts and Nodes back)."""
    n = int(os.environ.get("NPUOPS_IT_ROTATION") or 1)
    if n <= 1:
        return
    seed = int(os.environ.get("NPUOPS_IT_SEED") or int(time.time() // 86400))
    keep = [it for i, it in enumerate(items) if i % n == seed % n]
    drop = [it for i, it in enumerate(items) if i % n != seed % n]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
