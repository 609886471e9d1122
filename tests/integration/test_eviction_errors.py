"""drain.evict / drain.probe_evictions against the lab's real kube-apiserver: answers that no retry
can change end the step at once (even with no deadline), and the server-side dry run names them
without evicting anything.

Cases: a pod covered by two PodDisruptionBudgets (the apiserver's 500 "more than one
PodDisruptionBudget"), a ValidatingAdmissionPolicy that denies CREATE of pods/eviction for one pod
(403), a ServiceAccount without pods/eviction (RBAC 403), a policy/v1 PDB with ``selector: {}``
(covers the whole namespace), and a plain pod whose eviction is accepted.

Everything runs on a kwok node of its own (``it-evict-<random>``, tainted NoSchedule so nothing
else lands there), so it does not collide with tests using lab-node-*; all objects are removed at
teardown.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes import client, config
from labhelpers import create_kwok_nodes, delete_nodes, dry_run_eviction, gone, poll, wait

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain

pytestmark = pytest.mark.lab

NS = "gpu-drv"
TAINT = "lab.npuops.io/it-evict"


def no_retry(delay):
    """``sleep`` for drain.evict: every retry (of an eviction or of the PDB loop) sleeps first, so an
    answer that must end the step at once fails the test at its first retry instead of running on."""
    pytest.fail("drain.evict retried (sleep(%r) before another attempt): the answer was not final" % delay)


class CountingCore:
    """CoreV1Api that records every eviction call (name, dry_run); more than ``limit`` calls fail the
    test (a retry loop that does not sleep ends there too)."""

    def __init__(self, core, limit=3):
        self._core = core
        self.limit = limit
        self.evictions = []

    def create_namespaced_pod_eviction(self, name, namespace, body, **kw):
        self.evictions.append((name, kw.get("dry_run")))
        if len(self.evictions) > self.limit:
            pytest.fail("%d eviction calls, at most %d expected: %s"
                        % (len(self.evictions), self.limit, self.evictions))
        return self._core.create_namespaced_pod_eviction(name, namespace, body, **kw)

    def __getattr__(self, name):
        return getattr(self._core, name)


@pytest.fixture(scope="module")
def lab(lab_kubeconfig):
    api = config.new_client_from_config(config_file=lab_kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def evict_node(lab):
    """A kwok node of this module's own, Ready, tainted NoSchedule, without type=kwok (other tests'
    scheduling and node lists stay as they are); deleted at teardown."""
    core = client.CoreV1Api(lab)
    (name,) = create_kwok_nodes(
        core,
        "it-evict",
        1,
        labels={"kubernetes.io/os": "linux"},
        taints=[{"key": TAINT, "value": "true", "effect": "NoSchedule"}],
        kwok_type_label=False,
    )
    try:
        yield name
    finally:
        delete_nodes(core, [name])


@pytest.fixture(scope="module")
def workloads(lab, evict_node):
    """Deployments of 1 pod each on the module's node, plus the PDBs and the admission policy.

    Returns {"two_pdbs": pod, "frozen": pod, "free": pod, "policy_message": str} (pods as API dicts).
    """
    core, apps, policy = client.CoreV1Api(lab), client.AppsV1Api(lab), client.PolicyV1Api(lab)
    adm = client.AdmissionregistrationV1Api(lab)
    sfx = evict_node.rsplit("-", 1)[1]
    names = {k: "it-evict-%s-%s" % (k.replace("_", ""), sfx) for k in ("two_pdbs", "frozen", "free")}
    vap = "it-evict-deny-%s" % sfx
    message = "evictions of %s pods are frozen by the lab policy" % names["frozen"]
    made = []
    try:
        for app in names.values():
            labels = {"app": app}
            apps.create_namespaced_deployment(
                NS,
                {
                    "metadata": {"name": app, "labels": labels},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {
                                "nodeName": evict_node,  # pinned: no scheduler, never another test's node
                                "tolerations": [{"key": TAINT, "operator": "Exists"}],
                                "terminationGracePeriodSeconds": 1,
                                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                            },
                        },
                    },
                },
            )
            made.append(("deploy", app))
        for pdb, spec in (
            ("a", {"maxUnavailable": 1}),
            ("b", {"minAvailable": 0}),
        ):
            pdb_name = "%s-%s" % (names["two_pdbs"], pdb)
            body = {
                "metadata": {"name": pdb_name},
                "spec": dict(spec, selector={"matchLabels": {"app": names["two_pdbs"]}}),
            }
            policy.create_namespaced_pod_disruption_budget(NS, body)
            made.append(("pdb", pdb_name))
        adm.create_validating_admission_policy(
            {
                "metadata": {"name": vap},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods/eviction"],
                            }
                        ]
                    },
                    "validations": [
                        {
                            # Deployment pods are named <deployment>-<hash>-<suffix>: deny the one pod of it.
                            "expression": "!object.metadata.name.startsWith('%s-')" % names["frozen"],
                            "message": message,
                            "reason": "Forbidden",
                        }
                    ],
                },
            }
        )
        made.append(("vap", vap))
        adm.create_validating_admission_policy_binding(
            {
                "metadata": {"name": vap},
                "spec": {
                    "policyName": vap,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}},
                },
            }
        )
        made.append(("vapb", vap))

        def running():
            found = {}
            for key, app in names.items():
                items = [
                    p
                    for p in json.loads(
                        core.list_namespaced_pod(NS, label_selector="app=" + app, _preload_content=False).data
                    )["items"]
                    if not p["metadata"].get("deletionTimestamp")
                ]
                # Running matters: the apiserver evicts Pending pods without looking at PDBs.
                if len(items) != 1 or items[0]["status"].get("phase") != "Running":
                    return None
                found[key] = items[0]
            return found

        pods = wait("the 3 pods Running on %s" % evict_node, running)

        # The policy takes effect once the apiserver's policy cache has it: wait for the dry run to say so.
        def refused():
            r = dry_run_eviction(core, pods["frozen"])
            return r[0] == 403, r

        poll("admission policy in force (dry-run eviction of %s refused with 403)" % names["frozen"], refused,
             timeout=30)
        yield dict(pods, policy_message=message)
    finally:
        for kind, what in reversed(made):
            if kind == "deploy":
                gone(apps.delete_namespaced_deployment, what, NS)
            elif kind == "pdb":
                gone(policy.delete_namespaced_pod_disruption_budget, what, NS)
            elif kind == "vap":
                gone(adm.delete_validating_admission_policy, what)
            else:
                gone(adm.delete_validating_admission_policy_binding, what)
        wait(
            "pods on %s gone" % evict_node,
            lambda: not core.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + evict_node).items,
        )


def still_there(core_v1, p):
    now = core_v1.read_namespaced_pod(p["metadata"]["name"], NS)
    return now.metadata.uid == p["metadata"]["uid"] and now.metadata.deletion_timestamp is None


def test_two_pdbs_end_the_eviction_at_once(lab, workloads):
    core_v1 = client.CoreV1Api(lab)
    p = workloads["two_pdbs"]
    ref = "%s/%s" % (NS, p["metadata"]["name"])
    assert dry_run_eviction(core_v1, p) == (500, drain.MULTIPLE_PDBS_MESSAGE)

    core = CountingCore(core_v1)
    assert drain.probe_evictions(core, [p]) == {ref: drain.MULTIPLE_PDBS_MESSAGE + " (HTTP 500)"}
    assert core.evictions == [(p["metadata"]["name"], "All")]
    assert still_there(core_v1, p)
    # Found from the PDBs alone as well (no write at all).
    (reason,) = drain.multi_pdb_pods(client.PolicyV1Api(lab), [p]).values()
    deploy = "%s/%s" % (NS, p["metadata"]["labels"]["app"])
    assert reason == drain.multiple_pdb_reason(["%s-a" % deploy, "%s-b" % deploy])
    assert reason.startswith("covered by 2 PodDisruptionBudgets (%s-a, %s-b): " % (deploy, deploy))

    core.evictions.clear()
    with pytest.raises(drain.DrainError) as err:
        drain.evict(core, [p], None, sleep=no_retry)
    exc = err.value
    assert exc.kind == "refused" and exc.status == 500 and exc.pod == ref
    assert ref in str(exc) and "more than one PodDisruptionBudget" in str(exc)
    assert exc.remaining == [ref] and exc.removed == []
    assert core.evictions == [(p["metadata"]["name"], None)]
    assert still_there(core_v1, p)


def test_admission_policy_denial_ends_the_eviction_at_once(lab, workloads):
    core_v1 = client.CoreV1Api(lab)
    p = workloads["frozen"]
    ref = "%s/%s" % (NS, p["metadata"]["name"])
    status, message = dry_run_eviction(core_v1, p)
    assert status == 403 and workloads["policy_message"] in message

    core = CountingCore(core_v1)
    refused = drain.probe_evictions(core, [p, workloads["free"]])
    assert list(refused) == [ref] and workloads["policy_message"] in refused[ref] and "(HTTP 403)" in refused[ref]
    assert still_there(core_v1, p) and still_there(core_v1, workloads["free"])

    core.evictions.clear()
    with pytest.raises(drain.DrainError) as err:
        drain.evict(core, [p], None, sleep=no_retry)
    exc = err.value
    assert exc.kind == "refused" and exc.status == 403 and exc.pod == ref
    assert ref in str(exc) and workloads["policy_message"] in str(exc)
    assert core.evictions == [(p["metadata"]["name"], None)]
    assert still_there(core_v1, p)


def test_rbac_denial_ends_the_eviction_at_once(lab, workloads, sa_kubeconfig):
    p = workloads["free"]
    ref = "%s/%s" % (NS, p["metadata"]["name"])
    path = sa_kubeconfig(rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    api = config.new_client_from_config(config_file=path)
    try:
        core = CountingCore(client.CoreV1Api(api))
        refused = drain.probe_evictions(core, [p])
        assert list(refused) == [ref] and 'cannot create resource "pods/eviction"' in refused[ref]
        core.evictions.clear()
        with pytest.raises(drain.DrainError) as err:
            drain.evict(core, [p], None, sleep=no_retry)
        assert err.value.kind == "refused" and err.value.status == 403 and len(core.evictions) == 1
        assert "pods/eviction" in str(err.value)
    finally:
        api.close()
    assert still_there(client.CoreV1Api(lab), p)


def test_dry_run_is_accepted_and_changes_nothing_then_a_real_eviction_goes_through(lab, workloads, evict_node):
    core_v1 = client.CoreV1Api(lab)
    p = workloads["free"]
    assert dry_run_eviction(core_v1, p)[0] in (200, 201)
    assert drain.probe_evictions(core_v1, [p]) == {}
    assert still_there(core_v1, p)
    # Last test of the module: the Deployment replaces the pod (new uid, same node), the old uid leaves.
    ref = "%s/%s" % (NS, p["metadata"]["name"])
    assert drain.evict(core_v1, [p], time.monotonic() + 30) == [ref]
    assert drain.wait_gone(core_v1, evict_node, {p["metadata"]["uid"]}, 60) == []


@pytest.fixture
def own_namespace(lab):
    """A namespace of this test's own: a ``selector: {}`` PDB covers every pod of its namespace."""
    core = client.CoreV1Api(lab)
    name = "it-evict-ns-%s" % uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": name}})
    try:
        wait("default ServiceAccount in %s" % name, lambda: core.list_namespaced_service_account(name).items)
        yield name
    finally:
        gone(core.delete_namespace, name)


def test_empty_selector_pdb_counts_for_the_apiserver_too(lab, evict_node, own_namespace):
    core_v1, policy = client.CoreV1Api(lab), client.PolicyV1Api(lab)
    ns = own_namespace
    pod_body = {
        "metadata": {"name": "solo", "labels": {"app": "solo"}},
        "spec": {
            "nodeName": evict_node,
            "tolerations": [{"key": TAINT, "operator": "Exists"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    core_v1.create_namespaced_pod(ns, pod_body)
    try:
        policy.create_namespaced_pod_disruption_budget(
            ns, {"metadata": {"name": "total"}, "spec": {"minAvailable": 0, "selector": {}}}
        )
        policy.create_namespaced_pod_disruption_budget(
            ns,
            {"metadata": {"name": "solo"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "solo"}}}},
        )
        p = wait(
            "pod solo Running",
            lambda: (
                (d := json.loads(core_v1.read_namespaced_pod("solo", ns, _preload_content=False).data))["status"].get(
                    "phase"
                )
                == "Running"
                and d
            ),
        )
        ref = "%s/solo" % ns
        # Ours: {} covers the pod, so two PDBs do; the apiserver agrees (its multiple-PDB answer).
        assert drain.pdbs_covering(policy, [p]) == {ref: ["%s/solo" % ns, "%s/total" % ns]}
        assert dry_run_eviction(core_v1, p) == (500, drain.MULTIPLE_PDBS_MESSAGE)
        assert list(drain.probe_evictions(core_v1, [p])) == [ref]
    finally:
        gone(core_v1.delete_namespaced_pod, "solo", ns)


def test_wait_gone_names_a_pod_still_terminating(lab, evict_node):
    """A finalizer keeps an evicted pod on the node: wait_gone returns it with the reason."""
    core_v1 = client.CoreV1Api(lab)
    name = "it-evict-held-%s" % uuid.uuid4().hex[:6]
    core_v1.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name, "finalizers": ["lab.npuops.io/hold"]},
            "spec": {
                "nodeName": evict_node,
                "tolerations": [{"key": TAINT, "operator": "Exists"}],
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    try:
        p = wait(
            "pod %s Running" % name,
            lambda: (
                (d := json.loads(core_v1.read_namespaced_pod(name, NS, _preload_content=False).data))["status"].get(
                    "phase"
                )
                == "Running"
                and d
            ),
        )
        assert drain.evict(core_v1, [p], time.monotonic() + 30) == ["%s/%s" % (NS, name)]
        (left,) = drain.wait_gone(core_v1, evict_node, {p["metadata"]["uid"]}, 2)
        assert left.startswith("%s/%s (terminating, deletionTimestamp " % (NS, name))
        assert left.endswith(", finalizers lab.npuops.io/hold)") and ", grace " in left
        # A second eviction of the terminating pod is not even sent; the caller still waits for it.
        held = json.loads(core_v1.read_namespaced_pod(name, NS, _preload_content=False).data)
        counting = CountingCore(core_v1)
        assert drain.evict(counting, [held], None) == ["%s/%s" % (NS, name)] and counting.evictions == []
    finally:
        gone(core_v1.patch_namespaced_pod, name, NS, {"metadata": {"finalizers": None}})
        gone(core_v1.delete_namespaced_pod, name, NS)
        wait(
            "pod %s gone" % name,
            lambda: not core_v1.list_namespaced_pod(NS, field_selector="metadata.name=" + name).items,
        )
