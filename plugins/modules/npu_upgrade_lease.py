#!/usr/bin/python
# ruff: noqa: E402  (Ansible modules import after DOCUMENTATION/EXAMPLES/RETURN)
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_upgrade_lease
short_description: Run-wide maintenance lock as a Kubernetes Lease
version_added: 0.1.0
description:
  - Takes, renews or releases a C(coordination.k8s.io/v1) Lease that marks "a driver/OS upgrade run
    is in progress on this cluster", so two runs (two operators, a cron job and a human) never
    drain and upgrade nodes at the same time.
  - O(state=present) acquires the lease for O(holder) or renews it when O(holder) already holds it
    (C(holderIdentity) = O(holder), C(leaseDurationSeconds) = O(ttl), C(renewTime) = now). If another
    holder's lease is still valid (C(renewTime) + C(leaseDurationSeconds) > now) the task fails with
    a message naming that holder and since when (C(acquireTime)). A lease that was not renewed within
    its TTL is taken over; RV(taken_over) and RV(previous_holder) say so.
  - O(state=absent) releases (deletes) the lease only when O(holder) holds it; a lease of another
    holder is left alone (RV(changed=false), a warning).
  - Writes use optimistic concurrency - a create fails if the lease appeared meanwhile, a replace or
    delete carries the C(resourceVersion) that was read - and a conflict re-reads and decides again,
    so of two concurrent acquirers exactly one wins.
  - Renew it (run the task again) more often than O(ttl) during long runs, for example before each
    batch (C(serial)).
  - With O(participant), the Lease is a B(maintenance window shared by several processes) (AWX job
    slices, or several C(ansible-playbook) runs with one run id) - O(holder) is the run id, and the
    annotation C(npuops.io/window) holds the window's record - state (C(open), C(stopping), C(closed)),
    target digest per vendor (O(targets)), failure budget and failed nodes, and each participant's own
    lease (renewed, ttl). O(state=present) joins (the same run id, open, the same targets) or opens it;
    refusals name what differs - another run's live window, another target or policy for a vendor
    under the same run id, a closed window. With O(renew_only) it renews the window and this
    participant, records O(failure) (more failed nodes than the budget moves the window to
    C(stopping) - no participant admits a node after that) or O(stop). O(state=absent) takes the
    participant out; the last live one closes the window (O(close)). See
    C(plugins/module_utils/window/shared.py).
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
options:
  name:
    description:
      - Lease name.
    type: str
    default: npuops-fleet-maintenance-window
  namespace:
    description:
      - Namespace of the lease. C(kube-system) exists on every cluster and is where control-plane
        leader-election leases live; RBAC there is usually admin-only, which suits a cluster-wide
        maintenance lock. Use a dedicated namespace if the automation's account may not write there.
    type: str
    default: kube-system
  holder:
    description:
      - Identity of this run, C(<controller host>/<pid or run id>), for example
        C(ctl-1/20261129T0930-4711). Use the same value to renew and to release.
    type: str
    required: true
  ttl:
    description:
      - C(leaseDurationSeconds) - seconds the lease stays valid after each acquire or renew.
    type: int
    default: 3600
  take_over:
    description:
      - Holder identity of a run known to be dead (for example its C(ansible-playbook) was killed) whose
        lease is still valid; O(state=present) then takes the lease over from exactly that holder
        (RV(taken_over), RV(previous_holder)). Any other valid holder is still refused. The refusal
        message names the value to pass.
      - With O(participant) and O(state=absent) - participants of the shared window known to be dead
        (comma-separated), taken out before deciding whether this call closes the window.
    type: str
  renew_only:
    description:
      - O(state=present) only - the run holds the lease already and renews it. When it is gone or
        another holder's (it expired and another run took it over), fail with RV(operation=lost) and
        RV(lease_lost=true) instead of creating or taking it back; the run is no longer the only one and
        must stop (client-go's leader election never re-acquires silently either). A renewal that
        collides with another renewal of the same holder (the hosts of one run) counts as renewed.
    type: bool
    default: false
  state:
    description:
      - C(present) acquires or renews; C(absent) releases if held by O(holder).
    type: str
    choices: [present, absent]
    default: present
  participant:
    description:
      - This process's name in a shared window (AWX job id, else control node and a random suffix);
        turns on the shared window (see the description). Its own lease lasts O(ttl) seconds from each
        renewal.
    type: str
  targets:
    description:
      - With O(participant) and O(state=present) - per vendor, the list of its hosts' digests (16 hex
        digits of sha256 over a target version and upgradePolicy; filter C(npuops.fleet.window_targets)).
        A vendor whose digests neither hold nor are held by the window's refuses the join.
    type: dict
    default: {}
  max_failures:
    description:
      - With O(participant) - the window's failure budget when this call opens it (failed nodes beyond it
        stop the window); a join keeps the opener's.
    type: int
    default: 0
  failure:
    description:
      - With O(participant) and O(renew_only) - a failed node to count against the window's budget.
    type: dict
    suboptions:
      node:
        description: The Node's name.
        type: str
        required: true
      reason:
        description: Why it failed (first 300 characters kept).
        type: str
        required: true
  stop:
    description:
      - With O(participant) and O(renew_only) - move the window to C(stopping) with this reason (a refusal).
    type: str
  close:
    description:
      - With O(participant) and O(state=absent) - close the window when no other participant is live.
        False leaves it open (an AWX upgrade slice; the workflow's close job closes it).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reads the lease and reports what would happen; writes nothing.
  diff_mode:
    support: none
    description: No diff is produced; RV(lease) and RV(previous_holder) show the outcome.
notes:
  - Needs C(get), C(create), C(update), C(delete) on C(leases.coordination.k8s.io) in O(namespace).
  - Clocks - validity is judged with this controller's clock against C(renewTime) written by the
    holder's controller; keep controllers NTP-synchronised and O(ttl) well above any skew.
"""

EXAMPLES = r"""
- name: Take the maintenance lock for this run (fails if another run holds it)
  npuops.fleet.npu_upgrade_lease:
    holder: "{{ lookup('ansible.builtin.pipe', 'hostname') }}/{{ run_id }}"
    ttl: 1800
  run_once: true
  delegate_to: localhost

- name: Release it at the end (only if we hold it)
  npuops.fleet.npu_upgrade_lease:
    holder: "{{ lookup('ansible.builtin.pipe', 'hostname') }}/{{ run_id }}"
    state: absent
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
window:
  description: The shared window's record after this call (O(participant) only).
  returned: with O(participant)
  type: dict
join:
  description: C(new) (this call opened the window) or C(join) (it joined the same run's).
  returned: with O(participant) and O(state=present) without O(renew_only)
  type: str
others:
  description: The other participants whose own lease is live (O(state=absent)).
  returned: with O(participant) and O(state=absent)
  type: list
  elements: str
participants:
  description: On a refusal - the participants the held window's record names (live or not).
  returned: on a refusal
  type: list
  elements: str
stop_reason:
  description: Why the window admits no node now (stopping or closed), else null.
  returned: with O(participant)
  type: str
changed:
  description: True when the lease was created, renewed, taken over or released.
  returned: always
  type: bool
operation:
  description: >-
    What happened - C(create), C(renew), C(take_over) (expired lease of another holder),
    C(acquire_free) (lease object without holder), C(release), C(absent) (nothing to release),
    C(not_ours) (held by another holder; left alone); on failure C(refuse) (another holder's valid lease)
    or C(lost) (O(renew_only) and the lease is gone or another holder's).
  returned: always
  type: str
  sample: create
acquired:
  description: Whether O(holder) holds the lease after the task (O(state=present)).
  returned: always
  type: bool
lease_lost:
  description: True when O(renew_only) found the lease gone or another holder's (RV(operation=lost)).
  returned: on failure with O(renew_only)
  type: bool
taken_over:
  description: True when another holder's lease was taken over (expired, or named by O(take_over)).
  returned: always
  type: bool
previous_holder:
  description: Holder before this task (empty when none).
  returned: always
  type: str
  sample: ctl-1/4711
holder:
  description: Holder after the task; empty after a release.
  returned: always
  type: str
acquire_time:
  description: C(spec.acquireTime) after the task (RFC 3339, UTC).
  returned: when the lease exists after the task
  type: str
  sample: "2026-11-29T09:30:00.000000Z"
renew_time:
  description: C(spec.renewTime) after the task.
  returned: when the lease exists after the task
  type: str
expires:
  description: C(renewTime) + C(leaseDurationSeconds).
  returned: when the lease exists after the task
  type: str
lease:
  description: The Lease object after the task (as planned in check mode); null after a release.
  returned: always
  type: dict
kube_auth:
  description:
    - Where the Kubernetes credentials came from, so a run shows which cluster holds its lease.
  returned: when the client was built (also when the lease is held by another holder or the API fails)
  type: dict
  contains:
    source:
      description: >-
        C(option kubeconfig), C(env K8S_AUTH_KUBECONFIG), C(env KUBECONFIG), C(~/.kube/config),
        C(in-cluster) or C(host+api_key).
      type: str
      sample: env KUBECONFIG
    kubeconfig:
      description: The kubeconfig path or list as given; null for C(in-cluster) and C(host+api_key).
      type: str
      sample: /home/ops/.kube/a:/home/ops/.kube/b
    context:
      description: >-
        Context used - O(context) or E(K8S_AUTH_CONTEXT), else the C(current-context) of the merged
        kubeconfig; null without a kubeconfig.
      type: str
      sample: prod-cluster
"""

import traceback

from ansible_collections.npuops.fleet.plugins.module_utils.fleet import caller
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import (
    DEFAULT_NAME,
    DEFAULT_NAMESPACE,
    LeaseHeldError,
    LeaseLostError,
    LeaseManager,
    lease_state,
    now_utc,
)
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.npuops.fleet.plugins.module_utils.window import shared
from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import WindowLease


def argument_spec():
    """The module's own options; K8sModule adds the auth options."""
    return dict(
        name={"type": "str", "default": DEFAULT_NAME},
        namespace={"type": "str", "default": DEFAULT_NAMESPACE},
        holder={"type": "str", "required": True},
        ttl={"type": "int", "default": 3600},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        take_over={"type": "str"},
        renew_only={"type": "bool", "default": False},
        participant={"type": "str"},
        targets={"type": "dict", "default": {}},
        max_failures={"type": "int", "default": 0},
        failure={"type": "dict", "options": {"node": {"type": "str", "required": True},
                                             "reason": {"type": "str", "required": True}}},
        stop={"type": "str"},
        close={"type": "bool", "default": True},
    )


def main():
    module = K8sModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.run(lambda: run(module))


def run(module):
    p = module.params
    holder = (p["holder"] or "").strip()
    if not holder:
        module.fail_json(msg="holder must not be empty")
    if p["ttl"] < 1:
        module.fail_json(msg="ttl must be >= 1 second, got %d" % p["ttl"])
    where = "%s/%s" % (p["namespace"], p["name"])
    api_client = module.client()
    window = None
    try:
        mgr = LeaseManager(api_client, p["namespace"], p["name"],
                           labels={"app.kubernetes.io/managed-by": "npuops.fleet"})
        if (p["participant"] or "").strip():
            window = WindowLease(mgr, holder, p["participant"].strip(), p["ttl"],
                                 process=caller.playbook_process(), gone=caller.process_gone)
        if window is not None:
            if p["state"] == "absent":
                sweep = tuple(x.strip() for x in (p["take_over"] or "").split(",") if x.strip())
                res = window.leave(p["close"], module.check_mode, sweep)
                res.update(lease=None, previous={})
            elif p["renew_only"]:
                failure = (p["failure"]["node"], p["failure"]["reason"]) if p["failure"] else None
                res = window.renew(failure, p["stop"]) if not module.check_mode else {
                    "action": "renew", "changed": False, "lease": mgr.read(), "record": {}}
            else:
                res = window.join(dict(p["targets"] or {}), p["max_failures"],
                                  (p["take_over"] or "").strip() or None, module.check_mode)
        elif p["state"] == "present":
            res = mgr.acquire(holder, p["ttl"], module.check_mode, take_over=(p["take_over"] or "").strip() or None,
                              renew_only=p["renew_only"])
        else:
            res = mgr.release(holder, module.check_mode)
    except LeaseLostError as exc:
        st = lease_state(exc.lease, now_utc()) if exc.lease else {}
        module.fail_json(msg=str(exc), changed=False, operation="lost", lease_lost=True, acquired=False,
                         taken_over=False, previous_holder=st.get("holder", ""), holder=st.get("holder", ""),
                         lease=exc.lease or None)
    except LeaseHeldError as exc:
        st = lease_state(exc.lease, now_utc())
        parts = shared.read(exc.lease).get("participants")
        module.fail_json(msg=str(exc), changed=False, operation="refuse", acquired=False, taken_over=False,
                         participants=sorted(parts) if isinstance(parts, dict) else [],
                         previous_holder=st["holder"], holder=st["holder"], acquire_time=st["acquire_time"],
                         renew_time=st["renew_time"], expires=st["expires"], lease=exc.lease)
    except Exception as exc:
        status = getattr(exc, "status", None)
        module.fail_json(
            msg="lease %s: %s%s" % (where, "HTTP %s " % status if status else "", getattr(exc, "reason", None) or exc),
            exception=traceback.format_exc(),
        )
    previous = res.get("previous") or {}
    lease = res.get("lease")
    st = lease_state(lease, now_utc()) if lease else {}
    action = res["action"]
    result = dict(
        changed=res["changed"],
        operation=action,
        acquired=p["state"] == "present",
        taken_over=action == "take_over",
        previous_holder=previous.get("holder", ""),
        holder=st.get("holder", "") if p["state"] == "present" or action == "not_ours" else "",
        lease=lease,
    )
    if lease and p["state"] == "present":
        result.update(acquire_time=st["acquire_time"], renew_time=st["renew_time"], expires=st["expires"])
    if window is not None:
        rec = res.get("record") or shared.read(lease)
        result.update(window=rec or None, stop_reason=shared.stop_message(rec) if rec else None)
        if "join" in res:
            result["join"] = res["join"]
        if p["state"] == "absent":
            result.update(others=res.get("others") or [], holder="")
            where_msg = {"close": "closed", "leave": "left (still open for %s)" % ", ".join(res.get("others") or []),
                         "not_ours": "not ours (gone or another run's); left alone"}[action]
            result["msg"] = "window %s (%s): %s by %s" % (holder, where, where_msg, p["participant"])
            module.exit_json(**result)
    if action == "take_over":
        module.warn(
            "lease %s of %s expired at %s (not renewed within %ss); taken over by %s"
            % (where, previous.get("holder"), previous.get("expires"), previous.get("duration"), holder)
        )
        result["msg"] = "took over expired lease %s from %s" % (where, previous.get("holder"))
    elif action == "not_ours":
        module.warn("lease %s is held by %s, not %s; left alone" % (where, previous.get("holder"), holder))
        result["msg"] = "lease %s is held by %s; not released" % (where, previous.get("holder"))
    else:
        result["msg"] = "lease %s: %s by %s" % (where, action, holder)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
