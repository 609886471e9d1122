"""npu_window_nodes main(): the run's nodes over a two-page LIST, counts, requests, failures naming the
run id. CoreV1Api.list_node is faked; the paging (k8s/paged_list.py) and the frame are the real ones."""

from __future__ import annotations

import json

import kubernetes.client
import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import module as k8s_module
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.modules import npu_window_nodes as mod

KUBE_AUTH = {"source": "env KUBECONFIG", "kubeconfig": "/k/a", "context": "ctx"}
LAST = "nvidia.com/gpu-driver-upgrade-last-transition"
STATE = "nvidia.com/gpu-driver-upgrade-state"


def gpu_node(name, state, run_id, reason="step done"):
    anns = {}
    if run_id:
        anns[LAST] = json.dumps({"from": "", "to": state, "reason": reason, "at": "2026-12-05T05:21:00Z",
                                 "run": "tok", "run_id": run_id})
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", STATE: state}, "annotations": anns},
        "spec": {"unschedulable": state != "upgrade-done"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj)


class Core:
    """list_node only, two pages joined by a continue token; anything else the module calls fails."""

    def __init__(self, pages, error=None):
        self.pages = pages
        self.error = error
        self.calls = []

    def list_node(self, label_selector=None, limit=None, _continue=None, _preload_content=True, **_):
        self.calls.append({"label_selector": label_selector, "limit": limit, "continue": _continue,
                           "preload": _preload_content})
        if self.error:
            raise self.error
        page = 0 if _continue is None else int(_continue.split("-")[1])
        token = "page-%d" % (page + 1) if page + 1 < len(self.pages) else None
        return Resp({"items": self.pages[page], "metadata": {"continue": token} if token else {}})


PAGES = [
    [
        gpu_node("n-b", "upgrade-done", "R1"),
        gpu_node("n-x", "upgrade-done", "R0"),  # another run's node
        gpu_node("n-c", "upgrade-failed", "R1"),
    ],
    [gpu_node("n-a", "drain-required", "R1", "draining"), gpu_node("n-z", "upgrade-done", None)],
]


@pytest.fixture
def cluster(monkeypatch):
    holder = {"core": Core(PAGES)}
    monkeypatch.setattr(kubernetes.client, "CoreV1Api", lambda _client: holder["core"])
    monkeypatch.setattr(k8s_module, "get_api_client_and_source", lambda p, **kw: (object(), dict(KUBE_AUTH)))
    # one attempt per request: the retries' budget is the retry helper's, tested on its own
    once = k8s_retry.call
    monkeypatch.setattr(k8s_retry, "call", lambda fn, *a, **kw: once(fn, *a, **dict(kw, budget=0.001)))
    return holder


def run(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit) as ei:
        mod.main()
    return ei.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_runs_nodes_over_two_pages(cluster, capsys, check_mode):
    rc, res = run({"run_id": "R1", "page_size": 3}, capsys, check_mode)
    assert rc == 0 and not res.get("failed") and res["changed"] is False
    assert [(n["node"], n["state"], n["status"], n["unschedulable"]) for n in res["nodes"]] == [
        ("n-a", "drain-required", "in-progress", True),
        ("n-b", "upgrade-done", "upgraded", False),
        ("n-c", "upgrade-failed", "failed", True),
    ]
    assert res["nodes"][0]["ready"] is True
    assert res["nodes"][0]["last_transition"]["reason"] == "draining"
    assert res["counts"] == {"upgraded": 1, "failed": 1, "in-progress": 1, "other": 0}
    assert res["requests"] == 2
    assert res["run_id"] == "R1" and res["label_selector"] == "nvidia.com/gpu.present=true"
    assert res["kube_auth"] == KUBE_AUTH
    assert cluster["core"].calls == [
        {"label_selector": "nvidia.com/gpu.present=true", "limit": 3, "continue": None, "preload": False},
        {"label_selector": "nvidia.com/gpu.present=true", "limit": 3, "continue": "page-1", "preload": False},
    ]


def test_default_page_size_and_another_vendor(cluster, capsys):
    rc, res = run({"run_id": "R9", "vendor": "rebellions"}, capsys)
    zero = {"upgraded": 0, "failed": 0, "in-progress": 0, "other": 0}
    assert rc == 0 and res["nodes"] == [] and res["counts"] == zero
    assert [(c["label_selector"], c["limit"]) for c in cluster["core"].calls] == [
        ("rebellions.ai/npu.present=true", 500),
        ("rebellions.ai/npu.present=true", 500),
    ]


def test_a_failed_list_names_the_run(cluster, capsys):
    cluster["core"] = Core(PAGES, ApiException(status=403, reason="Forbidden"))
    rc, res = run({"run_id": "R1"}, capsys)
    assert rc == 1 and res["changed"] is False
    assert res["msg"] == (
        "window run R1: listing nodes with label selector 'nvidia.com/gpu.present=true' failed (HTTP 403): Forbidden"
    )
    assert res["run_id"] == "R1" and res["kube_auth"] == KUBE_AUTH


def test_an_unknown_vendor_names_the_run_before_the_cluster(cluster, capsys):
    rc, res = run({"run_id": "R1", "vendor": "nope"}, capsys)
    assert rc == 1 and res["msg"].startswith("window run R1: unknown vendor 'nope'") and res["changed"] is False
    assert cluster["core"].calls == [] and "kube_auth" not in res


@pytest.mark.parametrize(
    "args, msg",
    [
        ({"run_id": "  "}, "run_id must not be empty"),
        ({"run_id": "R1", "page_size": 0}, "window run R1: page_size must be >= 1, got 0"),
    ],
)
def test_bad_arguments_fail_before_the_cluster(cluster, capsys, args, msg):
    rc, res = run(args, capsys)
    assert rc == 1 and res["msg"] == msg and res["changed"] is False
    assert cluster["core"].calls == []


def test_run_id_is_required(capsys):
    rc, res = run({}, capsys)
    assert rc == 1 and "run_id" in res["msg"]
