# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action npu_phase: a phase boundary of a host's upgrade at one reading of the clock (the module file
holds its documentation). Runs on the control node: the record and the run's Lease there; on the host
only a ping, when the next phase must find it answering."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import sys
import time
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

# the Lease's pure helpers (the kubernetes client is imported only by a renewal)
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import (
    DEFAULT_NAME,
    DEFAULT_NAMESPACE,
    last_renewal,
)
from ansible_collections.npuops.fleet.plugins.plugin_utils.facts import set_like_set_fact

LEASE_SPEC = {
    "name": {"type": "str", "default": DEFAULT_NAME},
    "namespace": {"type": "str", "default": DEFAULT_NAMESPACE},
    "holder": {"type": "str", "required": True},
    "ttl": {"type": "int", "default": 3600},
    "renewed_at": {"type": "float", "default": 0.0},
    "stamp": {"type": "path"},
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "participant": {"type": "str"},
}

SPEC = {
    "result": {"type": "dict", "required": True},
    "phase": {"type": "str", "required": True},
    "start": {"type": "float", "required": True},
    "started": {"type": "str"},
    "next": {"type": "str", "required": True},
    "prefix": {"type": "str", "default": "_driver_upgrade_"},
    "facts": {"type": "dict", "default": {}},
    "fail_msg": {"type": "str", "default": ""},
    "reach_timeout": {"type": "int", "default": 0},
    "lease": {"type": "dict"},
}


def boundary(
    result: dict[str, Any], phase: str, start: float, started: str | None, next_phase: str, now: float
) -> dict[str, Any]:
    """The closed ``phase`` recorded in a copy of ``result`` and the next phase's start, all at ``now``
    (epoch seconds): ``{"result", "phase", "phase_start", "phase_started", "phase_end"}``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    took = round(now - float(start), 1)
    out = copy.deepcopy(result)
    out.setdefault("durations", {})[phase] = took
    out.setdefault("phases", {})[phase] = {"started": started, "finished": stamp, "duration_s": took}
    return {"result": out, "phase": next_phase, "phase_start": now, "phase_started": stamp, "phase_end": now}


def renewal_stamp(lease: dict[str, Any]) -> str:
    """The file whose mtime says when a host of this control node last renewed this Lease: the window's
    (``stamp``, in its run folder), else one in this ansible-playbook process's own temporary folder,
    shared by its forked workers and removed at its exit, named after the cluster and the Lease."""
    if lease.get("stamp"):
        return lease["stamp"]
    key = "\0".join(str(lease.get(k) or "") for k in ("kubeconfig", "context", "namespace", "name", "holder"))
    return os.path.join(C.DEFAULT_LOCAL_TMP, "npuops-lease-%s" % hashlib.sha256(key.encode()).hexdigest()[:16])


def renewal_due(lease: dict[str, Any], now: float) -> bool:
    """A third of the TTL since the last renewal known here: the window sizes the TTL so that the
    longest wait between two boundaries still fits after a renewal skipped as recent."""
    return now - last_renewal(lease.get("renewed_at"), renewal_stamp(lease)) >= int(lease["ttl"]) / 3


def client_missing() -> str | None:
    """Why ansible-core's own Python cannot renew the Lease (it runs the renewal, not a module), or None."""
    if importlib.util.find_spec("kubernetes") is None:
        return ("the run's Lease is renewed at phase boundaries by the control node's ansible-core Python (%s), "
                "which has no kubernetes client: install it there (pip install kubernetes) or use the "
                "execution environment" % sys.executable)
    return None


def renew(lease: dict[str, Any]) -> dict[str, Any] | None:
    """Renew the run's Lease as npu_upgrade_lease's ``renew_only`` does; None when renewed, else the
    failure (``msg``, and ``operation: lost`` / ``lease_lost`` when the Lease is gone or another's)."""
    # imported here: only a boundary that renews pays for the kubernetes client
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.client import get_api_client_and_source
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseLostError, LeaseManager

    name, namespace = lease["name"], lease["namespace"]
    try:
        auth = {"kubeconfig": lease.get("kubeconfig"), "context": lease.get("context")}
        client, _auth = get_api_client_and_source(auth)
        mgr = LeaseManager(client, namespace, name, labels={"app.kubernetes.io/managed-by": "npuops.fleet"})
        if lease.get("participant"):  # a shared window: this process's participant record too
            from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import WindowLease

            WindowLease(mgr, lease["holder"], lease["participant"], int(lease["ttl"])).renew()
        else:
            mgr.acquire(lease["holder"], int(lease["ttl"]), renew_only=True)
    except LeaseLostError as exc:
        return {"msg": str(exc), "operation": "lost", "lease_lost": True}
    except Exception as exc:  # the API's or the client's words, as the lease module reports them
        status = getattr(exc, "status", None)
        return {"msg": "lease %s/%s: %s%s" % (namespace, name, "HTTP %s " % status if status else "",
                                              getattr(exc, "reason", None) or exc)}
    try:  # the renewal is made; a stamp that cannot be written only costs an early renewal elsewhere
        stamp = renewal_stamp(lease)
        os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        os.utime(stamp)
    except OSError:
        pass
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def _ping(self, timeout: int, task_vars: dict[str, Any]) -> str | None:
        """Wait up to ``timeout`` seconds for the host to run a module, as wait_for_connection does
        (every 2 s, the connection reset between tries); None when it answered, else the last error."""
        end, error = time.monotonic() + timeout, "no try"
        while True:
            try:
                try:
                    self._connection.reset()
                except AttributeError:
                    pass
                if self._execute_module(module_name="ansible.legacy.ping", module_args={},
                                        task_vars=task_vars).get("ping") == "pong":
                    return None
                error = "ping test failed"
            except Exception as exc:  # a connection failure, the words wait_for_connection gives
                error = str(exc).strip()
            if time.monotonic() + 2 > end:
                return error
            time.sleep(2)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        res = super().run(tmp, task_vars)
        try:
            return self._boundary(res, task_vars)
        except Exception as exc:  # bad arguments, a broken stamp: a failure, never a lost host (facts: _boundary)
            res.update(failed=True, changed=False, host_lost=False,
                       msg=exc.message if isinstance(exc, AnsibleActionFail) else "npu_phase: %s" % exc)
            return res

    def _boundary(self, res: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        checked = ArgumentSpecValidator(SPEC).validate(self._task.args)
        if checked.error_messages:
            raise AnsibleActionFail("npu_phase: %s" % "; ".join(checked.error_messages))
        a = checked.validated_parameters
        # Whatever fails from here (a refusal, the renewal, the lease's arguments) leaves the phase open
        # with this record and these facts in the failed result: the rescue takes them back, so a node
        # prepare cordoned is still known to be prepared (and gets marked).
        res["ansible_facts"] = dict({a["prefix"] + "result": a["result"]}, **a["facts"])
        lease = None
        if a["lease"]:  # {} or null: no run Lease to renew
            lease_checked = ArgumentSpecValidator(LEASE_SPEC).validate(a["lease"])
            if lease_checked.error_messages:
                raise AnsibleActionFail("npu_phase: lease: %s" % "; ".join(lease_checked.error_messages))
            lease = lease_checked.validated_parameters
            if lease["ttl"] < 1:
                raise AnsibleActionFail("npu_phase: lease: ttl must be >= 1 second, got %d" % lease["ttl"])
            # said at the first boundary (the preflight's), not at the first renewal after a cordon
            missing = client_missing()
            if missing:
                raise AnsibleActionFail(missing)
        if a["fail_msg"]:  # the phase stays open
            res.update(failed=True, changed=False, host_lost=False, msg=a["fail_msg"])
            return res
        # No renewal into `done`: the host's upgrade is over (a failed renewal there must not fail a
        # finished node), and in check mode the Lease is left as it is, as npu_upgrade_lease would.
        if lease and a["next"] != "done" and not self._task.check_mode and renewal_due(lease, time.time()):
            failure = renew(lease)
            if failure:  # the phase stays open: the rescue records the failure in it
                res.update(failed=True, changed=False, host_lost=False, **failure)
                return res
        b = boundary(a["result"], a["phase"], a["start"], a["started"], a["next"], time.time())
        facts = {a["prefix"] + k: v for k, v in b.items()}
        facts.update(a["facts"])
        set_like_set_fact(self, facts)
        res.update(changed=False, ansible_facts=facts)
        if a["next"] != "done" and a["reach_timeout"] > 0:
            started = time.monotonic()
            error = self._ping(a["reach_timeout"], task_vars)
            res["elapsed"] = round(time.monotonic() - started, 1)
            if error is not None:
                res.update(failed=True, host_lost=True, msg="timed out waiting for ping module test: %s" % error)
            try:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            except Exception:  # a host lost after the ping made its folder: the failure above says so
                pass
        return res
