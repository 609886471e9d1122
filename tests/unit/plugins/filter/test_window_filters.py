"""The maintenance window's data shaping (plugin_utils/maintenance_window.py, the filters over it).

Expected values are written by hand for records shaped as the role's result and the lab tests' runs;
the equivalence tests render the playbook's former Jinja through Ansible's Templar (in a child process:
the controller's templating must not leak into the module tests of this process) on the same inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ansible_collections.npuops.fleet.plugins.plugin_utils import maintenance_window as mw


def record(host, status="preflight-ok", **extra):
    rec = {"host": host, "node": host, "vendor": "nvidia", "target_version": "550.90.07", "old_version": "535.183.06",
           "new_version": None, "status": status, "final_state": None, "rebooted": False,
           "kernel_before": "6.8.0-40-generic", "kernel_after": None, "durations": {}, "phases": {}, "reason": None,
           "started": "2026-12-05T05:20:00Z", "finished": "2026-12-05T05:21:00Z", "state_at_start": None,
           "identity": {"machine_id": "m-" + host}, "failure_domain": None, "reboot_planned": False,
           "reboot_planned_why": "no reboot planned", "kernel_patch": None,
           "plan": {"host_work": True, "route": "drain", "transitions": ["cordon-required"], "would_evict": ["ns/p"],
                    "blocking_pdbs": [], "pdbs_at_risk": [], "full_drain": None, "transaction": None,
                    "release_holds": ["nvidia-utils-535-server"]}}
    rec.update(extra)
    return rec


def fleet():
    return {
        "lab-node-1": {"driver_upgrade_result": record("lab-node-1", reboot_planned=True, failure_domain="r1"),
                       "driver_upgrade_preflight": {"longest_wait_s": 900, "pod_rules": {"ns/p": "evict"},
                                                    "boot_kernel": "6.8.0-45-generic",
                                                    "running_kernel": "6.8.0-40-generic"},
                       "_mw_parallel_one": 2},
        "lab-node-2": {"driver_upgrade_result": record("lab-node-2", failure_domain="r1",
                                                       state_at_start="upgrade-failed"),
                       "driver_upgrade_preflight": {"longest_wait_s": "300", "pod_rules": {}, "boot_kernel": "k",
                                                    "running_kernel": "k"},
                       "driver_upgrade_kernel_release": "6.8.0-52-generic", "_mw_parallel_one": 0,
                       "driver_upgrade_reboot_allowed": "no"},
        "lab-node-3": {"driver_upgrade_result": record("lab-node-3", status="already-at-target",
                                                       state_at_start="upgrade-done",
                                                       plan={"host_work": False, "route": None}),
                       "driver_upgrade_preflight": {"longest_wait_s": None, "pod_rules": {}},
                       "_mw_parallel_one": 1},
        "lab-npu-0": {"driver_upgrade_result": record("lab-npu-0", status="failed", vendor="rebellions",
                                                      reason="preflight: 3.0.0 not in apt sources"),
                      "_mw_parallel_one": 1},
        "lab-gone": {},
    }


HOSTS = ["lab-node-1", "lab-node-2", "lab-node-3", "lab-npu-0", "lab-gone"]


def test_rollout():
    out = mw.rollout(HOSTS, fleet(), rolling=False, canary=1, lease_ttl=1800)
    assert out == {"parallel": 1, "lanes": ["lab-node-2", "lab-node-1"], "serial": [1, 1],
                   "lease_ttl": 1800, "found_unfinished": {"lab-node-2": "upgrade-failed"}}
    # rolling: one batch of 100%; a long wait sizes the TTL: (3600 + 120) * 1.5
    hv = fleet()
    hv["lab-node-1"]["driver_upgrade_preflight"]["longest_wait_s"] = 3600
    out = mw.rollout(HOSTS, hv, rolling=True, canary=0, lease_ttl="600")
    assert (out["serial"], out["lease_ttl"]) == (["100%"], 5580)
    assert mw.rollout([], {}, canary=0)["serial"] == ["100%"]  # width 0: all at once


def test_workload_changes():
    assert mw.workload_changes(HOSTS, fleet()) == [
        {"node": "lab-node-1", "driver_version": "550.90.07", "vendor": "nvidia", "kernel_release": "6.8.0-45-generic"},
        {"node": "lab-node-2", "driver_version": "550.90.07", "vendor": "nvidia", "kernel_release": "6.8.0-52-generic"},
    ]


def test_workload_record():
    ran = {"changed": False, "stranded": ["ns/Deployment/a"], "unpredictable": [],
           "lines": ["ns/Deployment/a: 0 nodes"],
           "counts": {"stranded": 1}, "workloads": [{"name": "a"}], "refusal": "ns/Deployment/a would have no node"}
    assert mw.workload_record(ran, "refuse") == {
        "record": {"mode": "refuse", "stranded": ["ns/Deployment/a"], "unpredictable": [],
                   "lines": ["ns/Deployment/a: 0 nodes"], "counts": {"stranded": 1}, "workloads": [{"name": "a"}],
                   "error": None},
        "refusal": "ns/Deployment/a would have no node"}
    assert mw.workload_record(ran, "warn")["refusal"] == ""
    broken = {"failed": True, "msg": "forbidden: pods"}
    assert mw.workload_record(broken, "refuse")["refusal"] == (
        "the workload check could not run (maintenance_workload_compat=warn or skip to go on without it): "
        "forbidden: pods")
    assert mw.workload_record(broken, "warn")["record"]["error"] == "forbidden: pods"
    assert mw.workload_record({"skipped": True}, "refuse") == {"record": None, "refusal": ""}


def test_plan_rows():
    rows = mw.plan_rows(HOSTS, fleet(), "")
    assert [r["status"] for r in rows] == ["would-upgrade", "would-upgrade", "already-at-target", "refused", "refused"]
    assert rows[0]["pod_rules"] == {"ns/p": "evict"} and rows[0]["reboot"] is True
    assert rows[1]["reboot_fallback"] is False and rows[0]["reboot_fallback"] is True
    assert rows[2]["would_evict"] == [] and rows[2]["route"] is None
    assert rows[3]["reason"] == "preflight: 3.0.0 not in apt sources"
    assert rows[4] == {"host": "lab-gone", "status": "refused", "reason": "unreachable or no result in the preflight"}
    assert mw.plan_rows(HOSTS, fleet(), "x stranded")[0]["reason"] == "not started: workloads: x stranded"


@pytest.mark.parametrize("lanes, canary, width, mode, want", [
    (["a", "b", "c"], 0, 1, "batches", [["a"], ["b"], ["c"]]),
    (["a", "b", "c"], 1, 2, "batches", [["a"], ["b", "c"]]),
    (["a", "b", "c"], 1, 2, "rolling", [["a"], ["b", "c"]]),
    (["a", "b", "c"], 0, 0, "batches", [["a", "b", "c"]]),
    ([], 2, 1, "batches", []),
    (["a"], 3, 1, "batches", [["a"]]),
])
def test_plan_batches(lanes, canary, width, mode, want):
    assert mw.plan_batches(lanes, canary, width, mode) == want


def test_lease_outlook():
    assert mw.lease_outlook({"changed": True, "operation": "create", "previous_holder": ""}) == {
        "free": True, "operation": "create", "held_by": None, "expires": None, "message": None}
    refused = {"failed": True, "operation": "refuse", "previous_holder": "ctl-other/run-7",
               "expires": "2026-12-05T06:00:00Z", "msg": "lease held by ctl-other/run-7"}
    assert mw.lease_outlook(refused) == {"free": False, "operation": "refuse", "held_by": "ctl-other/run-7",
                                         "expires": "2026-12-05T06:00:00Z", "message": "lease held by ctl-other/run-7"}


def test_summary_rows_and_totals():
    rows = mw.summary_rows(HOSTS, fleet())
    assert rows[0]["status"] == "not-started" and rows[0]["reason"] == "not started: failure on lab-npu-0"
    assert rows[2]["status"] == "already-at-target" and rows[3]["status"] == "failed"
    assert rows[4] == {"host": "lab-gone", "status": "not-started", "final_state": None,
                       "reason": "unreachable or no result in the preflight"}
    assert mw.summary_rows(HOSTS, fleet(), "expired", "x")[1]["reason"] == (
        "not started: the run lost its maintenance lease: expired")
    assert mw.summary_rows(HOSTS, fleet(), None, "x")[1]["reason"] == "not started: refused: x"
    assert mw.stop_reason(["lab-node-1"], fleet()) == "the run stopped"
    assert mw.summary_totals(rows) == {
        "not_upgraded": ["lab-node-1", "lab-node-2", "lab-npu-0", "lab-gone"], "result": "failed",
        "counts": {"not-started": 3, "already-at-target": 1, "failed": 1}}
    assert mw.summary_totals([{"host": "a", "status": "upgraded"}])["result"] == "ok"
    assert mw.summary_totals([{"host": "a", "status": "upgraded"}], "lost")["result"] == "failed"


# ---- equivalence with the playbook's former Jinja -------------------------------------------------

OLD = {
    "batches": """{% set lanes = _mw_lanes | default([]) %}{% set c = maintenance_canary | default(0) | int %}
{%- set w = _mw_parallel | default(1) | int %}
{%- set rest = lanes[c:] | batch(w if w > 0 and _mw_rollout == 'batches' else [lanes | length, 1] | max) | list %}
{{- ([lanes[:c]] if c > 0 and lanes[:c] else []) + rest }}""",
    "compat": """{% set out = [] %}{% for h in hosts %}{% set r = hv[h].driver_upgrade_result | default(none) %}
{%- set b = hv[h].driver_upgrade_preflight | default({}) %}
{%- if r and r.status | default('') == 'preflight-ok' and r.node | default(none) and r.target_version | default(none) %}
{%- set k = hv[h].driver_upgrade_kernel_release | default(none, true)
            or (b.boot_kernel if r.reboot_planned | default(false) and b.boot_kernel | default(none)
                and b.boot_kernel != b.running_kernel | default(none) else none) %}
{%- set _ = out.append({'node': r.node, 'driver_version': r.target_version, 'vendor': r.vendor | default('nvidia'),
                        'kernel_release': k}) %}
{%- endif %}{% endfor %}{{ out }}""",
    "record": """{{ none if _mw_compat is skipped else
 {'mode': mode, 'stranded': _mw_compat.stranded | default([]),
  'unpredictable': _mw_compat.unpredictable | default([]),
  'lines': _mw_compat.lines | default([]), 'counts': _mw_compat.counts | default({}),
  'workloads': _mw_compat.workloads | default([]),
  'error': none if (_mw_compat is not skipped and _mw_compat.stranded is defined)
           else _mw_compat.msg | default('no result', true)} }}""",
    "refusal": """{{ '' if _mw_compat is skipped or mode != 'refuse' else
 _mw_compat.refusal | default('', true) if (_mw_compat is not skipped and _mw_compat.stranded is defined) else
 'the workload check could not run (maintenance_workload_compat=warn or skip to go on without it): '
 ~ _mw_compat.msg | default('no result', true) }}""",
    "failed": """{{ rows | selectattr('status', 'in', ['failed', 'not-started']) | map(attribute='host') | list }}""",
    "counts": """{{ dict(rows | map(attribute='status') | unique | zip(rows | map(attribute='status') | unique
                   | map('extract', dict(rows | groupby('status') | map('first')
                   | zip(rows | groupby('status') | map('last') | map('length')))))) }}""",
    "unfinished": """{% set u = hosts | map('extract', hv) | selectattr('driver_upgrade_result', 'defined')
 | map(attribute='driver_upgrade_result') | selectattr('state_at_start', 'defined')
 | rejectattr('state_at_start', 'in', [none, '', 'upgrade-done', 'upgrade-required']) | list %}
{{- dict(u | map(attribute='host') | zip(u | map(attribute='state_at_start'))) }}""",
    "ttl": """{{ [ttl | int, (((hosts | map('extract', waits) | select('defined')
 | map('int') | list + [0]) | max + 120) * 3 / 2) | round(0, 'ceil') | int] | max }}""",
}

RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
cases = json.load(sys.stdin)
out = []
for expr, variables in cases:
    out.append(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr)))
print(json.dumps(out))
"""


def render(cases):
    proc = subprocess.run([sys.executable, "-c", RENDER], input=json.dumps(cases), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_former_jinja_says_the_same():
    # the former private fact, undefined for a host without a wait
    waits = {h: v["driver_upgrade_preflight"]["longest_wait_s"] for h, v in fleet().items()
             if (v.get("driver_upgrade_preflight") or {}).get("longest_wait_s") is not None}
    batch_cases = [(lanes, c, w, m) for lanes in ([], ["a"], ["a", "b", "c", "d", "e"]) for c in (0, 1, 3)
                   for w in (0, 1, 2) for m in ("batches", "rolling")]
    compat = [{"changed": False, "stranded": [], "lines": ["a"], "refusal": "r"}, {"failed": True, "msg": "boom"},
              {"failed": True, "msg": ""}, {"skipped": True, "changed": False}]
    rows = mw.summary_rows(HOSTS, fleet())
    cases = [(OLD["batches"], {"_mw_lanes": lanes, "maintenance_canary": c, "_mw_parallel": w, "_mw_rollout": m})
             for lanes, c, w, m in batch_cases]
    cases += [(OLD["compat"], {"hosts": HOSTS, "hv": fleet()})]
    cases += [(OLD[k], {"_mw_compat": r, "mode": mode}) for r in compat for mode in ("refuse", "warn")
              for k in ("record", "refusal")]
    cases += [(OLD["failed"], {"rows": rows}), (OLD["counts"], {"rows": rows}),
              (OLD["unfinished"], {"hosts": HOSTS, "hv": fleet()}),
              (OLD["ttl"], {"hosts": HOSTS, "waits": waits, "ttl": 60}),
              (OLD["ttl"], {"hosts": HOSTS, "waits": waits, "ttl": 1800})]
    got = render(cases)
    want = [mw.plan_batches(lanes, c, w, m) for lanes, c, w, m in batch_cases]
    want += [mw.workload_changes(HOSTS, fleet())]
    for r in compat:
        for mode in ("refuse", "warn"):
            want += [mw.workload_record(r, mode)["record"], mw.workload_record(r, mode)["refusal"]]
    totals = mw.summary_totals(rows)
    roll = mw.rollout(HOSTS, fleet(), lease_ttl=60)
    want += [totals["not_upgraded"], totals["counts"], roll["found_unfinished"], roll["lease_ttl"],
             mw.rollout(HOSTS, fleet(), lease_ttl=1800)["lease_ttl"]]
    assert got == want
