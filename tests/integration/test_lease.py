"""npu_upgrade_lease on the lab: acquire, refuse, renew, take over, release, concurrency."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from ansible_tasks import run_module, run_tasks
from kubernetes import client

pytestmark = pytest.mark.lab
NS = "kube-system"


@pytest.fixture
def lease_name(api_client):
    name = "npuops-test-" + uuid.uuid4().hex[:8]
    yield name
    try:
        client.CoordinationV1Api(api_client).delete_namespaced_lease(name, NS)
    except client.ApiException as e:
        if e.status != 404:
            raise


def lease_mod(kubeconfig, name, holder, check=False, **kw):
    args = {"name": name, "holder": holder}
    args.update(kw)
    return run_module("npu_upgrade_lease", args, kubeconfig, check=check)


def test_lease_lifecycle(lab_kubeconfig, api_client, lease_name):
    coord = client.CoordinationV1Api(api_client)
    # check mode writes nothing
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", check=True)
    assert r["changed"] and r["operation"] == "create"
    with pytest.raises(client.ApiException):
        coord.read_namespaced_lease(lease_name, NS)

    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", ttl=300)
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] and r["operation"] == "create" and r["holder"] == "ctl-a/1" and r["acquired"]
    lease = coord.read_namespaced_lease(lease_name, NS)
    assert lease.spec.holder_identity == "ctl-a/1" and lease.spec.lease_duration_seconds == 300
    acquired = r["acquire_time"]

    # another holder is refused, with holder and since when in the message
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-b/2", ttl=300)
    assert r["failed"] and r["operation"] == "refuse"
    assert "held by ctl-a/1 since %s" % acquired in r["msg"]
    assert coord.read_namespaced_lease(lease_name, NS).spec.holder_identity == "ctl-a/1"

    # renew keeps acquireTime, moves renewTime
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", ttl=300)
    assert r["operation"] == "renew" and r["acquire_time"] == acquired and r["renew_time"] > acquired

    # absent by someone else: left alone
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-b/2", state="absent")
    assert not r.get("failed") and r["changed"] is False and r["operation"] == "not_ours"
    assert coord.read_namespaced_lease(lease_name, NS).spec.holder_identity == "ctl-a/1"

    # released by the holder; a second release is a no-op
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", state="absent")
    assert r["changed"] and r["operation"] == "release"
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", state="absent")
    assert r["changed"] is False and r["operation"] == "absent"


def test_expired_lease_is_taken_over(lab_kubeconfig, lease_name):
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-a/1", ttl=1)
    assert r["operation"] == "create", r.get("msg")
    time.sleep(1.5)
    r = lease_mod(lab_kubeconfig, lease_name, "ctl-b/2", ttl=60)
    assert not r.get("failed"), r.get("msg")
    assert r["taken_over"] and r["operation"] == "take_over" and r["previous_holder"] == "ctl-a/1"
    assert r["lease"]["spec"]["leaseTransitions"] == 1
    assert "taken over by ctl-b/2" in json.dumps(r.get("warnings", []))


def test_concurrent_acquirers_exactly_one_wins(api_client, lease_name):
    """8 threads race for a fresh lease through the API (create + replace with resourceVersion)."""
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseHeldError, LeaseManager

    start = threading.Barrier(8)
    won, refused, errors = [], [], []

    def contender(i):
        mgr = LeaseManager(api_client, NS, lease_name)
        start.wait()
        try:
            mgr.acquire("ctl-%d/1" % i, 60)
            won.append(i)
        except LeaseHeldError:
            refused.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(won) == 1 and len(refused) == 7
    holder = client.CoordinationV1Api(api_client).read_namespaced_lease(lease_name, NS).spec.holder_identity
    assert holder == "ctl-%d/1" % won[0]


def test_concurrent_takeover_of_expired_lease_exactly_one_wins(api_client, lease_name):
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseHeldError, LeaseManager

    LeaseManager(api_client, NS, lease_name).acquire("old/0", 1)
    time.sleep(1.5)
    start = threading.Barrier(6)
    won, refused, errors = [], [], []

    def contender(i):
        mgr = LeaseManager(api_client, NS, lease_name)
        start.wait()
        try:
            r = mgr.acquire("ctl-%d/1" % i, 60)
            won.append((i, r["action"]))
        except LeaseHeldError:
            refused.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(won) == 1 and len(refused) == 5
    assert won[0][1] == "take_over"


def _boundary(name, holder, renewed_at, stamp, ttl=6):
    """A phase boundary of the role (npu_phase) into install that renews the run's Lease when due, with
    the window's stamp file (its run folder) as the record of renewals across hosts and processes; the
    facts it set, read back by the next task. The host check is off (the play runs on localhost)."""
    return [
        {"name": "boundary", "ignore_errors": True,
         "npuops.fleet.npu_phase": {"result": {"status": "running"}, "phase": "prepare", "start": time.time() - 1,
                                    "next": "install", "lease": {"name": name, "namespace": NS, "holder": holder,
                                                                 "ttl": ttl, "renewed_at": renewed_at,
                                                                 "stamp": str(stamp)}}},
        {"name": "facts", "ansible.builtin.debug": {"msg": "{{ _driver_upgrade_phase | default('unset') }}"}},
    ]


def test_phase_boundaries_renew_the_run_lease_at_most_every_third_of_its_ttl(lab_kubeconfig, api_client, lease_name,
                                                                             tmp_path):
    """The role's phase boundaries renew the window's Lease on the control node: only once a third
    of its TTL has passed since the last renewal any host (or the window) made, and a Lease gone to
    another run fails the boundary (lease_lost; the host is not lost; the phase stays open)."""
    coord = client.CoordinationV1Api(api_client)
    holder = "ctl-a/" + uuid.uuid4().hex[:6]
    r = lease_mod(lab_kubeconfig, lease_name, holder, ttl=6)
    assert r["operation"] == "create", r
    taken = time.time()
    rv = coord.read_namespaced_lease(lease_name, NS).metadata.resource_version
    stamp = tmp_path / "lease-renewed"

    # the window renewed it a moment ago: not due, nothing written
    b, f = run_tasks(_boundary(lease_name, holder, taken, stamp), lab_kubeconfig)
    assert not b.get("failed"), b.get("msg")
    assert f["msg"] == "install" and coord.read_namespaced_lease(lease_name, NS).metadata.resource_version == rv
    assert not stamp.exists()

    # a third of the TTL later it is due: renewed, the holder kept
    time.sleep(max(0.0, taken + 2.2 - time.time()))
    b, f = run_tasks(_boundary(lease_name, holder, taken, stamp), lab_kubeconfig)
    assert not b.get("failed"), b.get("msg")
    lease = coord.read_namespaced_lease(lease_name, NS)
    assert lease.metadata.resource_version != rv and lease.spec.holder_identity == holder
    assert lease.spec.renew_time.timestamp() >= taken + 2
    assert stamp.stat().st_mtime >= taken + 2  # the renewal's time, for the other hosts and npu_node_upgrade
    rv = lease.metadata.resource_version

    # another host of this run renewed it just now (the stamp): the stale window time does not count
    b, f = run_tasks(_boundary(lease_name, holder, taken, stamp), lab_kubeconfig)
    assert not b.get("failed") and coord.read_namespaced_lease(lease_name, NS).metadata.resource_version == rv

    # check mode renews nothing, even when due
    time.sleep(2.2)
    b, f = run_tasks(_boundary(lease_name, holder, taken, stamp), lab_kubeconfig, check=True)
    assert not b.get("failed") and coord.read_namespaced_lease(lease_name, NS).metadata.resource_version == rv

    # into done, no renewal even when due: the host's upgrade is over
    done = _boundary(lease_name, holder, taken, stamp)
    done[0]["npuops.fleet.npu_phase"]["next"] = "done"
    b, f = run_tasks(done, lab_kubeconfig)
    assert not b.get("failed") and f["msg"] == "done"
    assert coord.read_namespaced_lease(lease_name, NS).metadata.resource_version == rv

    # another run took it: the boundary fails, the phase stays open for the rescue to record
    coord.patch_namespaced_lease(lease_name, NS, {"spec": {"holderIdentity": "ctl-b/other"}})
    b, f = run_tasks(_boundary(lease_name, holder, taken, stamp), lab_kubeconfig)
    assert b["failed"] and b["lease_lost"] is True and b["operation"] == "lost" and b["host_lost"] is False, b
    assert "ctl-b/other" in b["msg"], b["msg"]
    assert f["msg"] == "unset"
    assert coord.read_namespaced_lease(lease_name, NS).spec.holder_identity == "ctl-b/other"
