# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the playbook ``maintenance_window`` shapes its data: the rollout of the hosts the fleet preflight
passed, the workload check's change list and record, the plan's rows and batches, the summary's rows,
stop reason and totals (docs/maintenance-summary.schema.json).

Private to this collection; pure (no Ansible import: the filters in plugins/filter/ are thin wrappers).
``hostvars`` is any mapping of host name to that host's variables (Ansible's ``hostvars`` or a dict);
a host's record is the public fact ``driver_upgrade_result`` of role driver_upgrade, and what the
window reads of its preflight besides is the public fact ``driver_upgrade_preflight``.
Each function says what the playbook's Jinja said before; missing keys read as Jinja's ``default``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.filter.rollout import lane_order, lane_row
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UPGRADE_DONE, UPGRADE_REQUIRED

RESULT = "driver_upgrade_result"
PREFLIGHT = "driver_upgrade_preflight"
NO_RESULT = "unreachable or no result in the preflight"
# a node an earlier run left in one of these states is not "unfinished"
_SETTLED = (None, "", UPGRADE_DONE, UPGRADE_REQUIRED)


def _get(value: Any, key: str, default: Any = None) -> Any:
    """``value.key | default(default)``: the default only when the key is missing (or value is no mapping)."""
    if isinstance(value, Mapping) and key in value:
        return value[key]
    return default


def _host(hostvars: Any, host: Any) -> Mapping[str, Any]:
    """``hostvars[host]``, {} for an unknown host. In Ansible each lookup templates that host's variables:
    a function over many hosts reads each host once (``_per_host``) and passes the mappings on."""
    try:
        found = hostvars[host]
    except (KeyError, TypeError):
        return {}
    return found if isinstance(found, Mapping) else {}


def _int(value: Any) -> int:
    """Jinja's ``int`` filter: a number or a numeric string, else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _bool(value: Any) -> bool:
    """Ansible's ``bool`` filter for the values it knows (yes/no, on/off, true/false, 1/0).

    Not ansible.module_utils.parsing.convert_bool.boolean(strict=False): that one also says True for
    'y', 't', b'yes' and ' yes ' (it strips), where the filter, and so role driver_upgrade's
    ``driver_upgrade_reboot_allowed | bool``, says False; the plan row must say what the role will do."""
    check = str(value).lower() if isinstance(value, (str, int)) else value
    try:
        if check in ("yes", "on", "true", "1"):
            return True
        return bool(check == 1)
    except TypeError:
        return False


def _per_host(hosts: Sequence[Any], hostvars: Any) -> list[Mapping[str, Any]]:
    """Each host's variables, read once, in the hosts' order."""
    return [_host(hostvars, h) for h in hosts or []]


def _results(per_host: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of the hosts that have one (``per_host``: their variables), in the hosts' order."""
    return [vars_[RESULT] for vars_ in per_host if RESULT in vars_]


def rollout(hosts: Sequence[Any], hostvars: Any, rolling: bool = False, canary: Any = 0,
            lease_ttl: Any = 1800) -> dict[str, Any]:
    """After the fleet preflight, for the hosts still in the play: ``parallel`` (the width: the smallest
    positive ``_mw_parallel_one``, 0 = all at once), ``lanes`` (the hosts the preflight passed with work,
    in lane_order), ``serial`` (the upgrade play's batches: the canary alone, then the width or 100%),
    ``lease_ttl`` (at least 1.5 x (longest wait + 120 s), never below ``lease_ttl``) and
    ``found_unfinished`` (host -> the state an earlier run left its node in)."""
    per_host = _per_host(hosts, hostvars)
    positive = [n for n in (_int(v.get("_mw_parallel_one")) for v in per_host if "_mw_parallel_one" in v) if n > 0]
    width = min(positive) if positive else 0
    results = _results(per_host)
    lanes = lane_order([lane_row(r) for r in results if _get(r, "status") == "preflight-ok"])
    canary_n = _int(canary)
    serial: list[Any] = ([canary_n] if canary_n > 0 else []) + ["100%" if rolling or width == 0 else width]
    waits = [_int(w) for w in (_get(v.get(PREFLIGHT), "longest_wait_s") for v in per_host) if w is not None]
    ttl = max(_int(lease_ttl), int(math.ceil((max(waits + [0]) + 120) * 3 / 2)))
    unfinished = {r.get("host"): r.get("state_at_start") for r in results
                  if isinstance(r, Mapping) and "state_at_start" in r and r.get("state_at_start") not in _SETTLED}
    return {"parallel": width, "lanes": lanes, "serial": serial, "lease_ttl": ttl, "found_unfinished": unfinished}


def workload_changes(hosts: Sequence[Any], hostvars: Any) -> list[dict[str, Any]]:
    """What npu_workload_compat evaluates: per host the preflight passed (a record with a node and a
    target), its Node to the target driver, and to the kernel it boots when the run reboots it (a
    kernel patch, or a newer kernel already installed)."""
    out = []
    for host in hosts or []:
        vars_ = _host(hostvars, host)
        res = vars_.get(RESULT)
        if not res or _get(res, "status", "") != "preflight-ok" or not _get(res, "node") \
                or not _get(res, "target_version"):
            continue
        pre = vars_.get(PREFLIGHT) or {}
        boot, running = _get(pre, "boot_kernel"), _get(pre, "running_kernel")
        kernel = vars_.get("driver_upgrade_kernel_release") or (
            boot if _get(res, "reboot_planned", False) and boot and boot != running else None)
        out.append({"node": res["node"], "driver_version": res["target_version"],
                    "vendor": _get(res, "vendor", "nvidia"), "kernel_release": kernel})
    return out


def workload_record(compat: Any, mode: Any = "refuse") -> dict[str, Any]:
    """npu_workload_compat's registered result as the summary's ``workload_compat`` (``record``: None
    when the check was skipped) and the window's ``refusal`` ('' unless refuse mode refuses)."""
    compat = compat if isinstance(compat, Mapping) else {}
    skipped = bool(compat.get("skipped"))
    ran = not skipped and "stranded" in compat
    msg = compat.get("msg") or "no result"
    record = None if skipped else {
        "mode": mode, "stranded": compat.get("stranded", []), "unpredictable": compat.get("unpredictable", []),
        "lines": compat.get("lines", []), "counts": compat.get("counts", {}), "workloads": compat.get("workloads", []),
        "error": None if ran else msg,
    }
    if skipped or mode != "refuse":
        refusal = ""
    elif ran:
        refusal = compat.get("refusal") or ""
    else:
        refusal = ("the workload check could not run (maintenance_workload_compat=warn or skip to go on without it): "
                   + str(msg))
    return {"record": record, "refusal": refusal}


def plan_rows(hosts: Sequence[Any], hostvars: Any, workload_refusal: Any = "") -> list[dict[str, Any]]:
    """Per target host, what it would do (the plan's ``hosts``)."""
    rows: list[dict[str, Any]] = []
    for host in hosts or []:
        vars_ = _host(hostvars, host)
        res = vars_.get(RESULT)
        if res is None:
            rows.append({"host": host, "status": "refused", "reason": NO_RESULT})
            continue
        plan = _get(res, "plan", {})
        p = plan if isinstance(plan, Mapping) else {}
        status = res.get("status")
        rows.append({
            "host": host, "node": res.get("node"), "vendor": res.get("vendor"),
            "status": ("refused" if status == "failed" else "skipped" if status == "skipped"
                       else "would-upgrade" if p.get("host_work", True) else "already-at-target"),
            "reason": res.get("reason") or (("not started: workloads: " + str(workload_refusal))
                                            if workload_refusal and len(workload_refusal) > 0 else None),
            "old_version": res.get("old_version"), "target_version": res.get("target_version"),
            "state_at_start": res.get("state_at_start"), "route": p.get("route"),
            "reboot": res.get("reboot_planned"), "reboot_why": res.get("reboot_planned_why"),
            "would_evict": p.get("would_evict", []), "blocking_pdbs": p.get("blocking_pdbs", []),
            "pod_rules": _get(vars_.get(PREFLIGHT) or {}, "pod_rules", {}),
            "pdbs_at_risk": p.get("pdbs_at_risk", []),
            "full_drain": p.get("full_drain"), "transitions": p.get("transitions", []),
            "transaction": p.get("transaction"), "release_holds": p.get("release_holds", []),
            "apt_lists_from": p.get("apt_lists_from"), "packaging": p.get("packaging"),
            "gpu_support": p.get("gpu_support"),
            "reboot_fallback": _bool(vars_.get("driver_upgrade_reboot_allowed", True)),
            "identity": res.get("identity"), "kernel": res.get("kernel_before"),
            "kernel_patch": res.get("kernel_patch"),
        })
    return rows


def plan_batches(lanes: Sequence[Any], canary: Any = 0, width: Any = 1,
                 rollout_mode: Any = "batches") -> list[list[Any]]:
    """The hosts with work in the order they start: the canary, then batches of the width (rolling:
    one batch whose hosts start as lanes free up)."""
    lanes = list(lanes or [])
    c, w = _int(canary), _int(width)
    size = w if w > 0 and rollout_mode == "batches" else max(len(lanes), 1)
    tail = lanes[c:]
    rest = [tail[i:i + size] for i in range(0, len(tail), size)]
    head = lanes[:c] if c > 0 else []  # c < 0 would slice from the end
    return ([head] if head else []) + rest


def lease_outlook(check: Any) -> dict[str, Any]:
    """The plan's ``lease``: what the real run's acquisition would answer (``free``: it would take the
    Lease - create, renew, take over an expired or named one)."""
    check = check if isinstance(check, Mapping) else {}
    failed = bool(check.get("failed", False))
    return {"free": not failed, "operation": check.get("operation"),
            "held_by": check.get("previous_holder") or None,
            "expires": check.get("expires") if failed else None,
            "message": check.get("msg") if failed else None}


def stop_reason(hosts: Sequence[Any], hostvars: Any, lease_lost: Optional[Any] = None,
                workload_refusal: Any = "") -> str:
    """Why the hosts the preflight passed did not start: the lost Lease, the workload refusal, the first
    failed host, or 'the run stopped'."""
    return _stop_reason(_results(_per_host(hosts, hostvars)), lease_lost, workload_refusal)


def _stop_reason(results: Sequence[Any], lease_lost: Optional[Any], workload_refusal: Any,
                 window_stop: Any = "") -> str:
    """stop_reason over the hosts' records (``results``); ``window_stop``: why the shared window stopped
    (another process's failures), when this process has no reason of its own."""
    if lease_lost is not None:
        return "the run lost its maintenance lease: " + str(lease_lost)
    if workload_refusal and len(workload_refusal) > 0:
        return "refused: " + str(workload_refusal)
    failed = [r.get("host") for r in results if _get(r, "status") == "failed"]
    if failed:
        return "failure on " + str(failed[0])
    return str(window_stop) if window_stop else "the run stopped"


def summary_rows(hosts: Sequence[Any], hostvars: Any, lease_lost: Optional[Any] = None,
                 workload_refusal: Any = "", window_stop: Any = "") -> list[Any]:
    """Per target host its record; one the preflight passed that never started is ``not-started`` with
    why the run stopped (stop_reason; ``window_stop``: the shared window's stop, another process's), a
    host without a record ``not-started`` too."""
    records = [vars_.get(RESULT) for vars_ in _per_host(hosts, hostvars)]
    reason = _stop_reason([r for r in records if r is not None], lease_lost, workload_refusal, window_stop)
    rows: list[Any] = []
    for host, res in zip(hosts or [], records):
        if res is None:
            rows.append({"host": host, "status": "not-started", "final_state": None, "reason": NO_RESULT})
        elif _get(res, "status") == "preflight-ok":
            rows.append(dict(res, status="not-started", reason="not started: " + reason))
        else:
            rows.append(res)
    return rows


def summary_totals(rows: Sequence[Mapping[str, Any]], lease_lost: Optional[Any] = None) -> dict[str, Any]:
    """The summary's ``not_upgraded`` (failed or not started), ``result`` and ``counts`` (per status)."""
    rows = list(rows or [])
    not_upgraded = [r["host"] for r in rows if _get(r, "status") in ("failed", "not-started")]
    return {"not_upgraded": not_upgraded, "result": "failed" if not_upgraded or lease_lost is not None else "ok",
            "counts": dict(Counter(r["status"] for r in rows))}
