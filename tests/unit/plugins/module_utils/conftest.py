"""Shared fixtures of the module_utils unit tests (one folder per module_utils layer below this one)."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait

# fake_k8s / upgrade_pod_fixtures live here, beside the layer folders that import them
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def one_shot_waits(monkeypatch):
    """k8s_wait.wait_for evaluates its predicate once on a fresh list (the in-memory cluster has no
    watch): a wait that is not satisfied now times out at once."""

    def wait_for(list_fn, predicate, timeout, heartbeat=None, **kw):
        items = k8s_wait.list_raw(list_fn, **kw).get("items") or []
        return k8s_wait.WaitResult(predicate(items), items, 0.0)

    monkeypatch.setattr(k8s_wait, "wait_for", wait_for)
