"""The compact node view admission reads (k8s/node_snapshot.py): the Table's rows, the fresh whole
objects of nodes in an upgrade or cordoned, the file cache shared by the lanes."""

from __future__ import annotations

import json

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.node_snapshot import NodeSnapshot, parse_table
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
STATE = NV["upgrade_state_label"]
STATES = admission.IN_PROGRESS_STATES + (admission.UPGRADE_REQUIRED,)


def table(rows):
    # the columns kube-apiserver prints for Nodes (kubectl get nodes)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [{"name": c} for c in ("Name", "Status", "Roles", "Age", "Version")],
        "rows": [{"cells": [n, st, "<none>", "3d", "v1.35.4"]} for n, st in rows],
    }


def test_status_words_of_the_table():
    got = parse_table(table([("a", "Ready"), ("b", "NotReady"), ("c", "Ready,SchedulingDisabled"), ("d", "Unknown")]))
    assert got == {
        "a": {"ready": True, "unschedulable": False},
        "b": {"ready": False, "unschedulable": False},
        "c": {"ready": True, "unschedulable": True},
        "d": {"ready": False, "unschedulable": False},
    }


def test_a_table_without_status_is_refused():
    with pytest.raises(ValueError, match="Name/Status"):
        parse_table({"columnDefinitions": [{"name": "Name"}], "rows": []})


class Raw:
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class Api:
    """Answers the Table GET like the server (param_serialize/call_api of kubernetes >= 35)."""

    def __init__(self, rows):
        self.rows, self.gets = rows, 0

    def param_serialize(self, **kw):
        assert kw["header_params"]["Accept"].startswith("application/json;as=Table")
        assert ("includeObject", "None") in kw["query_params"]
        return ("GET", "/api/v1/nodes", kw["header_params"], None, None)

    def call_api(self, *args, **kw):
        self.gets += 1
        api = self

        class R:
            status = 200
            data = json.dumps(table(api.rows)).encode()

            def read(self):
                return self.data

        return R()


class Core:
    def __init__(self, api, whole):
        self.api_client, self.whole, self.lists = api, whole, []

    def list_node(self, label_selector=None, field_selector=None, _preload_content=True):
        self.lists.append((label_selector, field_selector))
        items = list(self.whole.values())
        if field_selector == "spec.unschedulable=true":
            items = [n for n in items if n["spec"].get("unschedulable")]
        elif label_selector and " in (" in label_selector:
            items = [n for n in items if (n["metadata"]["labels"] or {}).get(STATE) in STATES]
        return Raw({"items": items})


def whole(name, state=None, cordoned=False):
    labels = {NV["presence_label"]: "true"}
    if state:
        labels[STATE] = state
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {}},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_nodes_combine_rows_with_fresh_whole_objects(tmp_path):
    api = Api([("n0", "Ready"), ("n1", "NotReady"), ("n2", "Ready,SchedulingDisabled"), ("n3", "Ready")])
    # n2's cordon is gone since the Table (the fresh cordon list says so); n3 is in an upgrade
    core = Core(api, {"n3": whole("n3", sm.DRAIN_REQUIRED, cordoned=True)})
    nodes = NodeSnapshot(core, NV, STATES, cache_dir=str(tmp_path)).nodes()
    by = {n["metadata"]["name"]: n for n in nodes}
    assert sorted(by) == ["n0", "n1", "n2", "n3"]
    assert by["n3"]["metadata"]["labels"][STATE] == sm.DRAIN_REQUIRED
    assert [by[n]["spec"]["unschedulable"] for n in ("n0", "n1", "n2")] == [False, False, False]
    assert by["n1"]["status"]["conditions"][0]["status"] == "False"
    # what admission decides from it: n1 (NotReady) and n3 (upgrading) take maxUnavailable 2
    why = admission.verdict(NV, parse_policy({"maxUnavailable": 2, "maxParallelUpgrades": 0}), "n0", nodes)
    assert why and "n1, n3" in why


def test_the_table_is_shared_for_max_age_then_read_again(tmp_path):
    now = [1000.0]
    api = Api([("n0", "Ready")])
    core = Core(api, {})
    for _attempt in range(3):
        NodeSnapshot(core, NV, STATES, cache_dir=str(tmp_path), clock=lambda: now[0]).nodes()
    assert api.gets == 1
    now[0] += 16
    NodeSnapshot(core, NV, STATES, cache_dir=str(tmp_path), clock=lambda: now[0]).nodes()
    assert api.gets == 2
    # the exact lists are read every time
    assert len(core.lists) == 8


def test_without_a_table_client_the_full_list_is_read(tmp_path):
    class Plain:
        def list_node(self, label_selector=None, _preload_content=True, **kw):
            return Raw({"items": [whole("n0")]})

    nodes = NodeSnapshot(Plain(), NV, STATES, cache_dir=str(tmp_path)).nodes()
    assert [n["metadata"]["name"] for n in nodes] == ["n0"]


def test_a_cache_dir_someone_else_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    api = Api([("n0", "Ready")])
    core = Core(api, {})
    for _attempt in range(2):
        NodeSnapshot(core, NV, STATES, cache_dir=str(shared)).nodes()
    assert api.gets == 2 and not list(shared.iterdir())


def test_a_cache_dir_that_is_a_symlink_is_not_used(tmp_path):
    """Someone planted the shared temp dir's cache path as a link to a private directory of ours."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    link = tmp_path / "npuops-fleet-0"
    link.symlink_to(private)
    api = Api([("n0", "Ready")])
    core = Core(api, {})
    for _attempt in range(2):
        NodeSnapshot(core, NV, STATES, cache_dir=str(link)).nodes()
    assert api.gets == 2 and not list(private.iterdir())


def test_a_fresh_read_ignores_the_cache(tmp_path):
    api = Api([("n0", "Ready")])
    core = Core(api, {})
    NodeSnapshot(core, NV, STATES, cache_dir=str(tmp_path)).nodes()
    NodeSnapshot(core, NV, STATES, cache_dir=str(tmp_path), max_age=0.0).nodes()
    assert api.gets == 2


@pytest.mark.parametrize("cached", [False, True])
def test_an_admission_reads_the_table_fresh_once(tmp_path, monkeypatch, cached):
    from fake_k8s import FakeLeases

    from ansible_collections.npuops.fleet.plugins.module_utils.k8s import node_snapshot

    monkeypatch.setattr(node_snapshot.tempfile, "gettempdir", lambda: str(tmp_path))
    api = Api([("n0", "Ready"), ("n1", "Ready"), ("n2", "Ready"), ("n3", "Ready")])
    core = Core(api, {})
    if cached:
        NodeSnapshot(core, NV, STATES).nodes()  # another lane's read, within MAX_AGE
        api.gets = 0
    since, why = admission.wait_admission(core, admission.Slots(FakeLeases(), NV), NV, parse_policy({}), "n1", "tok", 5)
    assert why is None and since is not None
    # no cache: the Table this decision read is fresh and not read again (2 would be a double read);
    # a cached one is read afresh before the claim (0 would be an admission on the cache)
    assert api.gets == 1


def test_the_cache_key_is_the_cluster_not_the_clients_temp_file(tmp_path):
    """The kubernetes client writes an embedded CA to a new temp file per process: two processes on
    one cluster share the key, another CA behind the same address does not."""
    from types import SimpleNamespace

    def key(ca_text, name):
        ca = tmp_path / name
        ca.write_text(ca_text)
        api = SimpleNamespace(configuration=SimpleNamespace(host="https://127.0.0.1:6443", ssl_ca_cert=str(ca)))
        return NodeSnapshot(SimpleNamespace(api_client=api), NV, STATES, cache_dir=str(tmp_path))._cache_path()

    assert key("CA one", "tmpa") == key("CA one", "tmpb")
    assert key("CA one", "tmpc") != key("CA two", "tmpd")
