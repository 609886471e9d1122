"""drain.py: which eviction answers are retried, which end the step at once, the dry-run probe,
multiple-PDB detection and the wait for pods to leave the node (scripted fake API, fake clock)."""

from __future__ import annotations

import json
import os
import re

import pytest
import urllib3
import yaml
from kubernetes.client.rest import ApiException
from upgrade_pod_fixtures import pod

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")

PDB_MSG = "Cannot evict pod as it would violate the pod's disruption budget."
VAP_MSG = (
    "pods \"trainer-1\" is forbidden: ValidatingAdmissionPolicy 'deny-evict' with binding 'deny-evict' "
    "denied request: evictions of trainer-1 are frozen"
)
RBAC_MSG = (
    'pods "trainer-1" is forbidden: User "system:serviceaccount:gpu-drv:x" cannot create resource '
    '"pods/eviction" in API group "" in the namespace "default"'
)


def api_error(status: int, message: str = "", reason: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason or "status %d" % status)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return exc


def conn_refused() -> Exception:
    return urllib3.exceptions.MaxRetryError(
        None, "/api/v1/namespaces/default/pods/trainer-1/eviction", ConnectionRefusedError(111, "Connection refused")
    )


def conn_reset() -> Exception:
    return urllib3.exceptions.ProtocolError(
        "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
    )


def read_timeout() -> Exception:
    return urllib3.exceptions.ReadTimeoutError(None, "/eviction", "Read timed out. (read timeout=30)")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        self.sleeps.append(d)
        self.t += d


class ScriptedCore:
    """create_namespaced_pod_eviction answers from a per-pod script (an exception is raised, None =
    accepted); past the script's end, the last entry repeats. Records every call."""

    def __init__(self, script: dict[str, list]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, dict]] = []

    def create_namespaced_pod_eviction(self, name, ns, body, _preload_content=True, **kwargs):
        self.calls.append((ns, name, kwargs))
        answers = self.script.get(name) or [None]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return None

    def count(self, name: str) -> int:
        return sum(1 for c in self.calls if c[1] == name)


def run_evict(script, pods=None, deadline=None, **kw):
    clock = Clock()
    core = ScriptedCore(script)
    pods = pods if pods is not None else [pod(n) for n in script]
    try:
        result = drain.evict(core, pods, None if deadline is None else deadline, clock=clock, sleep=clock.sleep, **kw)
    except drain.DrainError as exc:
        return core, clock, exc
    return core, clock, result


# --- answers that end the step at once (deadline None = timeoutSeconds 0 = forever) ---
@pytest.mark.parametrize(
    "status,message",
    [
        (403, RBAC_MSG),
        (403, VAP_MSG),
        (400, "name in URL does not match name in Eviction object"),
        (401, "Unauthorized"),
        (422, 'Eviction.policy "trainer-1" is invalid: denied by policy'),
        (500, drain.MULTIPLE_PDBS_MESSAGE),
    ],
)
def test_deterministic_answers_end_the_step_after_one_call(status, message):
    core, clock, exc = run_evict({"trainer-1": [api_error(status, message)]})
    assert isinstance(exc, drain.DrainError)
    assert core.count("trainer-1") == 1 and clock.sleeps == []
    assert exc.kind == drain.KIND_REFUSED == "refused"
    assert exc.pod == "default/trainer-1" and exc.status == status and exc.server_message == message
    assert "default/trainer-1" in str(exc) and message in str(exc) and "HTTP %d" % status in str(exc)
    assert exc.removed == [] and exc.remaining == ["default/trainer-1"] and exc.pdbs == []


def test_refusal_stops_other_evictions_and_reports_what_was_done():
    pods = [pod("a-first"), pod("b-refused"), pod("c-untouched")]
    core, _calls, exc = run_evict({"b-refused": [api_error(500, drain.MULTIPLE_PDBS_MESSAGE)]}, pods=pods)
    assert exc.kind == "refused" and exc.pod == "default/b-refused"
    assert exc.removed == ["default/a-first"]
    assert exc.remaining == ["default/b-refused", "default/c-untouched"]
    assert core.count("c-untouched") == 0


def test_refusal_after_pdb_refusals_of_another_pod_is_not_a_timeout():
    pods = [pod("a-pdb"), pod("b-forbidden")]
    core, _calls, exc = run_evict(
        {"a-pdb": [api_error(429, PDB_MSG)], "b-forbidden": [api_error(403, VAP_MSG)]}, pods=pods, deadline=600
    )
    assert exc.kind == "refused" and exc.status == 403 and core.count("b-forbidden") == 1
    assert exc.refusals == {"default/a-pdb": PDB_MSG}


# --- transient answers: retried, then success ---
@pytest.mark.parametrize(
    "first",
    [
        api_error(500, "etcdserver: request timed out"),
        api_error(502, "Bad Gateway"),
        api_error(503, "the server is currently unable to handle the request"),
        api_error(504, 'couldn\'t update PodDisruptionBudget "db" due to conflicts'),
        conn_refused(),
        conn_reset(),
        read_timeout(),
        ConnectionRefusedError(111, "Connection refused"),
    ],
    ids=["500", "502", "503", "504", "refused", "reset", "read-timeout", "socket-refused"],
)
def test_transient_errors_are_retried_then_succeed(first):
    core, clock, result = run_evict({"trainer-1": [first, first, None]})
    assert result == ["default/trainer-1"]
    assert core.count("trainer-1") == 3 and clock.sleeps == [0.5, 1.0]


def test_transient_errors_until_the_deadline():
    core, clock, exc = run_evict({"trainer-1": [api_error(503, "unavailable")]}, deadline=90)
    assert exc.kind == drain.KIND_UNAVAILABLE and exc.status == 503 and exc.pod == "default/trainer-1"
    assert "unavailable" in str(exc) and 85 <= clock.t <= 90
    assert core.count("trainer-1") == len(clock.sleeps) + 1 > 2


def test_transient_errors_get_at_least_60s_even_near_the_deadline():
    # A step 10 s from its deadline still rides out an API server restart: 60 s of retries, not 10.
    core, clock, exc = run_evict({"trainer-1": [api_error(503, "unavailable")]}, deadline=10)
    assert exc.kind == drain.KIND_UNAVAILABLE and 55 <= clock.t <= 60


def test_apiserver_restart_in_the_middle_of_pdb_refusals():
    # 429 (PDB), then 20 s of connection refused, a 403 of the restarted apiserver's unsynced RBAC,
    # then accepted: one eviction accepted, no failure, the 403 not taken as a refusal.
    script = [api_error(429, PDB_MSG)] + [conn_refused()] * 6 + [api_error(403, RBAC_MSG), None]
    core, clock, result = run_evict({"trainer-1": script}, deadline=200)
    assert result == ["default/trainer-1"]
    assert core.count("trainer-1") == 9 and clock.t > 15


def test_a_403_without_an_outage_before_it_is_final():
    core, clock, exc = run_evict({"trainer-1": [api_error(429, PDB_MSG), api_error(403, RBAC_MSG), None]}, deadline=200)
    assert exc.kind == drain.KIND_REFUSED and exc.status == 403 and core.count("trainer-1") == 2


def test_a_403_that_lasts_after_an_outage_ends_the_step():
    core, clock, exc = run_evict({"trainer-1": [conn_refused(), api_error(403, RBAC_MSG)]}, deadline=200)
    assert exc.kind == drain.KIND_REFUSED and exc.status == 403
    assert 10 <= clock.t <= 20  # STARTUP_GRACE of retries, then refused


def test_a_lost_eviction_answer_is_not_a_second_eviction():
    # The first eviction went through but its answer was lost (connection reset); the repeat finds the
    # pod replaced (409 on the uid precondition): done, nothing else evicted.
    lost = [conn_refused(), api_error(409, "Precondition failed: UID in precondition: x, UID in object meta: y")]
    core, clock, result = run_evict({"trainer-1": lost}, deadline=5)
    assert result == ["default/trainer-1"] and core.count("trainer-1") == 2


def test_transport_error_until_the_deadline_has_no_status():
    _core, _calls, exc = run_evict({"trainer-1": [conn_refused()]}, deadline=5)
    assert exc.kind == "unavailable" and exc.status is None and "Connection refused" in exc.server_message


def test_transient_errors_with_no_deadline_keep_retrying():
    core, _calls, result = run_evict({"trainer-1": [conn_refused()] * 30 + [None]})
    assert result == ["default/trainer-1"] and core.count("trainer-1") == 31


# --- PDB refusals (429) ---
def test_pdb_refusals_until_the_deadline_are_a_timeout():
    seen = []
    core, clock, exc = run_evict(
        {"trainer-1": [api_error(429, PDB_MSG)]}, deadline=20, on_refusal=lambda r, m: seen.append((r, m))
    )
    assert exc.kind == drain.KIND_TIMEOUT == "timeout" and exc.status == 429
    assert exc.remaining == ["default/trainer-1"] and exc.refusals == {"default/trainer-1": PDB_MSG}
    assert PDB_MSG in str(exc) and clock.t <= 20
    assert core.count("trainer-1") == len(seen) == len(clock.sleeps) + 1
    assert clock.sleeps[:4] == [1.0, 2.0, 4.0, 5.0]


def test_pdb_refusals_with_no_deadline_wait_for_the_budget():
    core, clock, result = run_evict({"trainer-1": [api_error(429, PDB_MSG)] * 40 + [None]})
    assert result == ["default/trainer-1"] and core.count("trainer-1") == 41
    assert clock.t == pytest.approx(1 + 2 + 4 + 5 * 37)


# --- done without an eviction ---
UID_PRECONDITION = "Precondition failed: UID in precondition: uid-db-0, UID in object meta: uid-db-0-new"


@pytest.mark.parametrize(
    "status,message",
    [(404, 'pods "db-0" not found'), (409, UID_PRECONDITION)],
)
def test_gone_or_replaced_counts_as_done(status, message):
    core, _calls, result = run_evict({"db-0": [api_error(status, message)], "web-1": [None]})
    assert result == ["default/db-0", "default/web-1"] and core.count("db-0") == 1


def test_a_conflict_that_is_not_the_uid_precondition_is_retried():
    """eviction.go answers 409 when its own retries on a PDB update conflict run out: nothing was evicted."""
    msg = 'Operation cannot be fulfilled on poddisruptionbudgets.policy "web": the object has been modified'
    core, _calls, result = run_evict({"db-0": [api_error(409, msg), None]})
    assert result == ["default/db-0"] and core.count("db-0") == 2


def test_terminating_pod_is_not_evicted_but_returned_for_the_wait():
    pods = [pod("going", deleting=True), pod("web-1")]
    core, _calls, result = run_evict({"going": [api_error(403, "must not be called")], "web-1": [None]}, pods=pods)
    assert core.count("going") == 0
    assert result == ["default/going", "default/web-1"]


def test_eviction_body_has_uid_precondition():
    core = ScriptedCore({})
    seen = {}

    def capture(name, ns, body, _preload_content=True, **kw):
        seen.update(body)

    core.create_namespaced_pod_eviction = capture
    drain.evict(core, [pod("web-1")], None)
    assert seen["deleteOptions"] == {"preconditions": {"uid": "uid-web-1"}}
    assert seen["metadata"] == {"name": "web-1", "namespace": "default"}


def test_programming_errors_are_not_wrapped():
    with pytest.raises(TypeError):
        run_evict({"web-1": [TypeError("bad body")]})


@pytest.mark.parametrize(
    "exc,outcome",
    [
        (api_error(404), drain.OUTCOME_DONE),
        (api_error(409, UID_PRECONDITION), drain.OUTCOME_DONE),
        (api_error(409, "the object has been modified"), drain.OUTCOME_RETRY),
        (api_error(429, PDB_MSG), drain.OUTCOME_PDB),
        (api_error(500, "etcdserver: leader changed"), drain.OUTCOME_RETRY),
        (api_error(500, drain.MULTIPLE_PDBS_MESSAGE), drain.OUTCOME_REFUSED),
        (api_error(503), drain.OUTCOME_RETRY),
        (api_error(501), drain.OUTCOME_REFUSED),
        (api_error(403, VAP_MSG), drain.OUTCOME_REFUSED),
        (ApiException(status=0, reason="SSLError"), drain.OUTCOME_RETRY),
        (conn_reset(), drain.OUTCOME_RETRY),
        (ValueError("x"), drain.OUTCOME_REFUSED),
    ],
)
def test_classify_eviction_error(exc, outcome):
    assert drain.classify_eviction_error(exc) == outcome


def test_reason_reads_the_status_message_from_bytes_and_text():
    exc = ApiException(status=500, reason="Internal Server Error")
    exc.body = json.dumps({"message": drain.MULTIPLE_PDBS_MESSAGE}).encode()
    assert drain.classify_eviction_error(exc) == drain.OUTCOME_REFUSED
    exc.body = "not json"
    assert drain._reason(exc) == "not json"


# --- dry-run probe ---
def test_probe_evictions_reports_only_structural_refusals():
    clock = Clock()
    core = ScriptedCore(
        {
            "pdb-blocked": [api_error(429, PDB_MSG)],
            "two-pdbs": [api_error(500, drain.MULTIPLE_PDBS_MESSAGE)],
            "frozen": [api_error(403, VAP_MSG)],
            "flaky": [api_error(503, "x"), None],
            "gone": [api_error(404, "not found")],
            "fine": [None],
            "going": [api_error(403, "must not be called")],
        }
    )
    pods = [pod(n) for n in ("pdb-blocked", "two-pdbs", "frozen", "flaky", "gone", "fine")] + [
        pod("going", deleting=True)
    ]
    refused = drain.probe_evictions(core, pods, clock=clock, sleep=clock.sleep)
    assert refused == {
        "default/two-pdbs": drain.MULTIPLE_PDBS_MESSAGE + " (HTTP 500)",
        "default/frozen": VAP_MSG + " (HTTP 403)",
    }
    assert all(kw == {"dry_run": "All"} for _name, _ns, kw in core.calls)
    assert core.count("going") == 0 and core.count("flaky") == 2


def test_probe_gives_up_on_transient_errors_after_its_budget():
    clock = Clock()
    core = ScriptedCore({"flaky": [api_error(503, "x")]})
    assert drain.probe_evictions(core, [pod("flaky")], budget=10, clock=clock, sleep=clock.sleep) == {}
    assert clock.t <= 10


def test_probe_rides_out_a_15s_outage_by_default():
    clock = Clock()
    core = ScriptedCore({"frozen": [conn_refused()] * 5 + [api_error(403, VAP_MSG)]})
    refused = drain.probe_evictions(core, [pod("frozen")], clock=clock, sleep=clock.sleep)
    # 0.5+1+2+4+5 s of refused connections, then the admission policy's 403 -- which lasts past the
    # startup grace, so it is the structural refusal the probe reports.
    assert list(refused) == ["default/frozen"] and "HTTP 403" in refused["default/frozen"]
    assert all(c[2] == {"dry_run": "All"} for c in core.calls)


# --- PDB coverage (D13: policy/v1 selector {} covers the whole namespace) ---
class PolicyApi:
    def __init__(self, pdbs):
        self.pdbs = pdbs

    def list_pod_disruption_budget_for_all_namespaces(self, _preload_content=True, **_):
        class Resp:
            data = json.dumps({"items": self.pdbs, "metadata": {"resourceVersion": "1"}})

        return Resp()


def pdb(name, selector, ns="default", allowed=1, **spec):
    body = {"metadata": {"name": name, "namespace": ns}, "spec": dict(spec), "status": {"disruptionsAllowed": allowed}}
    if selector is not None:
        body["spec"]["selector"] = selector
    return body


def empty_selector_pdb():
    with open(os.path.join(FIX, "pdb-empty-selector.yaml")) as f:
        doc = yaml.safe_load(f)
    assert doc["spec"]["selector"] == {}
    doc["status"] = {"expectedPods": 0, "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 2}
    return doc


def test_empty_selector_pdb_covers_every_pod_of_its_namespace_whatever_expected_pods_says():
    pods = [pod("web-1", labels={"app": "web"}), pod("bare", labels={}), pod("other", ns="kube-system")]
    api = PolicyApi([empty_selector_pdb(), pdb("no-selector", None)])
    found = drain.blocking_pdbs(api, pods)
    assert [(f["pdb"], f["pods"]) for f in found] == [("default/total", ["default/web-1", "default/bare"])]
    assert "minAvailable=2" in found[0]["detail"]
    assert drain.pdbs_covering(api, pods) == {"default/web-1": ["default/total"], "default/bare": ["default/total"]}
    assert drain.multi_pdb_pods(api, pods) == {}


def test_pods_covered_by_two_pdbs_are_structural_blockers():
    pods = [pod("web-1", labels={"app": "web"}), pod("db-0", labels={"app": "db"}), pod("x", ns="other")]
    api = PolicyApi(
        [
            pdb("web", {"matchLabels": {"app": "web"}}, maxUnavailable=1),
            pdb("total", {}, minAvailable=1),
            pdb("elsewhere", {}, ns="kube-system"),
        ]
    )
    assert drain.multi_pdb_pods(api, pods) == {
        "default/web-1": "covered by 2 PodDisruptionBudgets (default/total, default/web): "
        "the eviction API refuses such pods"
    }
    assert drain.pdbs_covering(api, pods)["default/db-0"] == ["default/total"]
    assert drain.multi_pdb_pods(api, []) == {}


def test_multiple_pdb_answer_is_named_with_the_covering_pdbs():
    pods = [pod("web-1", labels={"app": "web"})]
    covering = drain.covering_from_items(
        [pdb("pdb-b", {}), pdb("pdb-a", {"matchLabels": {"app": "web"}}), pdb("pdb-c", {}, ns="other")], pods
    )
    assert covering == {"default/web-1": ["default/pdb-a", "default/pdb-b"]}
    assert drain.is_multiple_pdbs_answer(drain.MULTIPLE_PDBS_MESSAGE + " (HTTP 500)")
    assert not drain.is_multiple_pdbs_answer(PDB_MSG)
    assert (
        drain.covering_note("default/web-1", covering["default/web-1"])
        == "PodDisruptionBudgets covering default/web-1: default/pdb-a, default/pdb-b"
    )
    assert drain.covering_note("default/web-1", []) == "PodDisruptionBudgets covering default/web-1: none found now"
    unread = drain.covering_note("default/web-1", None)
    assert unread == "PodDisruptionBudgets covering default/web-1: (could not be read)"


# --- waiting until the pods are gone (D11) ---
def recreated_fixture():
    """The D11 fixture as (before, after) pod dicts: same name ns1/db-0, new uid, no node, Pending."""
    with open(os.path.join(FIX, "drain-same-name-recreated.txt")) as f:
        text = f.read()
    pods = []
    for line in text.splitlines():
        m = re.search(r"metadata\.uid:\s*(\S+)\s+spec\.nodeName:\s*(\S+)\s+phase:\s*(\w+)", line)
        assert m, line
        p = pod("db-0", ns="ns1", owner="StatefulSet", phase=m.group(3))
        p["metadata"]["uid"] = m.group(1)
        p["spec"]["nodeName"] = m.group(2).strip('"')
        pods.append(p)
    return pods


class NodePods:
    """list_pod_for_all_namespaces with the spec.nodeName field selector, like the apiserver."""

    def __init__(self, pods):
        self.pods = pods

    def list_pod_for_all_namespaces(self, field_selector=None, _preload_content=True, **_):
        node = field_selector.split("=", 1)[1]
        items = [p for p in self.pods if p["spec"].get("nodeName") == node]

        class Resp:
            data = json.dumps({"items": items, "metadata": {"resourceVersion": "1"}})

        return Resp()


@pytest.fixture
def one_shot_waits(monkeypatch):
    def wait_for(list_fn, predicate, timeout, heartbeat=None, **kw):
        items = k8s_wait.list_raw(list_fn, **kw).get("items") or []
        return k8s_wait.WaitResult(predicate(items), items, 0.0)

    monkeypatch.setattr(k8s_wait, "wait_for", wait_for)


def test_same_name_recreated_without_node_counts_as_gone(one_shot_waits):
    before, after = recreated_fixture()
    assert (
        before["spec"]["nodeName"] == "node-a"
        and after["spec"]["nodeName"] == ""
        and after["status"]["phase"] == "Pending"
    )
    assert drain.wait_gone(NodePods([after]), "node-a", {before["metadata"]["uid"]}, 5) == []
    # Still there under its old uid: not gone.
    assert drain.wait_gone(NodePods([before]), "node-a", {before["metadata"]["uid"]}, 5) == [
        "ns1/db-0 (not terminating, phase Running)"
    ]


def test_same_name_on_another_node_or_with_another_uid_on_this_node_counts_as_gone(one_shot_waits):
    before, _after = recreated_fixture()
    elsewhere = dict(before, spec={"nodeName": "node-b"})
    again_here = dict(before, metadata=dict(before["metadata"], uid="new-uid"))
    uids = {before["metadata"]["uid"]}
    assert drain.wait_gone(NodePods([elsewhere]), "node-a", uids, 5) == []
    assert drain.wait_gone(NodePods([again_here]), "node-a", uids, 5) == []


def test_terminating_pods_keep_the_wait_and_say_why(one_shot_waits):
    going = pod("trainer-1", deleting=True)
    going["spec"]["nodeName"] = "n1"
    going["metadata"]["deletionGracePeriodSeconds"] = 900
    stuck = pod("db-0", deleting=True)
    stuck["spec"]["nodeName"] = "n1"
    stuck["metadata"]["finalizers"] = ["example.com/flush"]
    left = drain.wait_gone(NodePods([going, stuck]), "n1", {"uid-trainer-1", "uid-db-0", "uid-gone"}, 5)
    assert left == [
        "default/db-0 (terminating, deletionTimestamp 2026-01-01T00:00:00Z, grace ?s, finalizers example.com/flush)",
        "default/trainer-1 (terminating, deletionTimestamp 2026-01-01T00:00:00Z, grace 900s)",
    ]
    assert [s.split(" (", 1)[0] for s in left] == ["default/db-0", "default/trainer-1"]


def test_wait_gone_with_no_uids_does_not_list():
    assert drain.wait_gone(object(), "n1", set(), 5) == []
