"""The maintenance window's data shaping (plugin_utils/maintenance_window.py, the filters over it).

Expected values are written by hand for records shaped as the role's result and the lab tests' runs;
the equivalence tests render the playbook's former Jinja through Ansible's Templar (in a child process:
the controller's templating must not leak into the module tests of this process) on the same inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

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
    # another process of the shared window spent the budget: its reason, unless this process has its own
    other = "maintenance window R stopped: failure on lab-x (install): dpkg"
    assert mw.summary_rows(["lab-node-1"], fleet(), None, "", other)[0]["reason"] == "not started: " + other
    assert mw.summary_rows(HOSTS, fleet(), None, "", other)[0]["reason"] == "not started: failure on lab-npu-0"
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
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader()  # the former Jinja called npuops.fleet.lane_row/lane_order and community.general.counter
cases = json.load(sys.stdin)
out = []
for expr, variables in cases:
    out.append(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr)))
print(json.dumps(out))
"""


# the folder holding ansible_collections/npuops/fleet (build/collections, tests/conftest.py), for the child's Ansible
COLLECTIONS = str(Path(mw.__file__).parents[5])


def render(cases):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, "-c", RENDER], input=json.dumps(cases), capture_output=True, text=True,
                          check=False, env=env)
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


# The rest of the former Jinja (playbooks/maintenance_window.yml before commit c03d2a0), the private facts
# renamed to the public ones as above: _driver_upgrade_result -> driver_upgrade_result,
# _driver_upgrade_k8s_preflight / _driver_upgrade_before -> driver_upgrade_preflight; hostvars -> hv,
# ansible_play_hosts / _mw_targets -> hosts. Per-host loop tasks (set_fact over _mw_targets) are a for loop.
OLD_MORE = {
    # _mw_positive, _mw_width, _mw_canary, _mw_rolling, _mw_lane_rows, _mw_lanes, _mw_serial
    "rollout": """{% set positive = hosts | map('extract', hv, '_mw_parallel_one') | map('int') | select('gt', 0)
   | list %}
{%- set width = positive | min if positive | length > 0 else 0 %}
{%- set canary = maintenance_canary | default(0) | int %}
{%- set rolling = _mw_rollout == 'rolling' %}
{%- set lane_rows = hosts | map('extract', hv) | selectattr('driver_upgrade_result', 'defined')
   | map(attribute='driver_upgrade_result') | selectattr('status', 'eq', 'preflight-ok')
   | map('npuops.fleet.lane_row') | list %}
{{- {'parallel': width, 'lanes': lane_rows | npuops.fleet.lane_order,
     'serial': ([canary | int] if canary | int > 0 else [])
               + [('100%' if rolling or width | int == 0 else width | int)]} }}""",
    "plan_rows": """{% set out = [] %}{% for _mw_host in hosts %}
{%- set _mw_res = hv[_mw_host]['driver_upgrade_result'] | default(none) %}
{%- set _mw_p = (_mw_res or {}).plan | default({}) %}
{%- set _ = out.append(
     {'host': _mw_host, 'status': 'refused', 'reason': 'unreachable or no result in the preflight'}
     if _mw_res is none else
     {'host': _mw_host, 'node': _mw_res.node, 'vendor': _mw_res.vendor,
      'status': ('refused' if _mw_res.status == 'failed' else 'skipped' if _mw_res.status == 'skipped'
                 else 'would-upgrade' if _mw_p.host_work | default(true) else 'already-at-target'),
      'reason': _mw_res.reason or (('not started: workloads: ' ~ _mw_workload_refusal)
                                   if _mw_workload_refusal | default('') | length > 0 else none),
      'old_version': _mw_res.old_version, 'target_version': _mw_res.target_version,
      'state_at_start': _mw_res.state_at_start | default(none), 'route': _mw_p.route | default(none),
      'reboot': _mw_res.reboot_planned | default(none), 'reboot_why': _mw_res.reboot_planned_why | default(none),
      'would_evict': _mw_p.would_evict | default([]), 'blocking_pdbs': _mw_p.blocking_pdbs | default([]),
      'pod_rules': (hv[_mw_host]['driver_upgrade_preflight'] | default({}, true)).pod_rules | default({}),
      'pdbs_at_risk': _mw_p.pdbs_at_risk | default([]),
      'full_drain': _mw_p.full_drain | default(none), 'transitions': _mw_p.transitions | default([]),
      'transaction': _mw_p.transaction | default(none), 'release_holds': _mw_p.release_holds | default([]),
      'apt_lists_from': _mw_p.apt_lists_from | default(none), 'packaging': _mw_p.packaging | default(none),
      'gpu_support': _mw_p.gpu_support | default(none),
      'reboot_fallback': hv[_mw_host]['driver_upgrade_reboot_allowed'] | default(true) | bool,
      'identity': _mw_res.identity | default(none), 'kernel': _mw_res.kernel_before | default(none),
      'kernel_patch': _mw_res.kernel_patch | default(none)}) %}
{%- endfor %}{{ out }}""",
    # _mw_lease_would (one key per line in the playbook)
    "lease": """{{ {'free': _mw_lease_check is not failed,
    'operation': _mw_lease_check.operation | default(none),
    'held_by': _mw_lease_check.previous_holder | default(none, true),
    'expires': _mw_lease_check.expires | default(none) if _mw_lease_check is failed else none,
    'message': _mw_lease_check.msg | default(none) if _mw_lease_check is failed else none} }}""",
    "stop_reason": """{% set _mw_stop_reason = ('the run lost its maintenance lease: ' ~ _mw_lease_lost)
   if _mw_lease_lost is defined else
   ('refused: ' ~ _mw_workload_refusal) if _mw_workload_refusal | default('') | length > 0 else
   (hosts | map('extract', hv) | selectattr('driver_upgrade_result', 'defined')
    | map(attribute='driver_upgrade_result') | selectattr('status', 'eq', 'failed')
    | map(attribute='host') | map('regex_replace', '^', 'failure on ') | list
    | first | default('')) %}""",
    # _mw_row per target (summary), with _mw_stop_reason above
    "summary_rows": """{% set out = [] %}{% for _mw_host in hosts %}
{%- set _mw_res = hv[_mw_host]['driver_upgrade_result'] | default(none) %}
{%- set _ = out.append(
     {'host': _mw_host, 'status': 'not-started', 'final_state': none,
      'reason': 'unreachable or no result in the preflight'}
     if _mw_res is none else
     (_mw_res | combine({'status': 'not-started',
                         'reason': 'not started: ' ~ (_mw_stop_reason | default('the run stopped', true))})
      if _mw_res.status == 'preflight-ok' else _mw_res)) %}
{%- endfor %}{{ out }}""",
    # the summary's result, not_upgraded and counts (_mw_failed; counts as the playbook had it)
    "totals": """{% set _mw_failed = rows | default([]) | selectattr('status', 'in', ['failed', 'not-started'])
   | map(attribute='host') | list %}
{{- {'result': 'failed' if _mw_failed | length > 0 or _mw_lease_lost is defined else 'ok',
     'not_upgraded': _mw_failed,
     'counts': rows | default([]) | map(attribute='status') | community.general.counter} }}""",
}


def _hv_variants():
    """(name, hosts, hostvars) the former rollout Jinja saw: every host in the play has _mw_parallel_one (an
    unreachable one had left ansible_play_hosts; the filter skips a host without it)."""
    in_play = [h for h in HOSTS if h != "lab-gone"]
    wide = fleet()
    wide["lab-node-1"]["_mw_parallel_one"] = "3"
    wide["lab-node-3"]["_mw_parallel_one"] = 0
    wide["lab-npu-0"]["_mw_parallel_one"] = "2"
    return [
        ("empty", [], {}),
        ("one host", ["lab-node-1"], fleet()),
        ("refused host only", ["lab-npu-0"], fleet()),
        ("at target only", ["lab-node-3"], fleet()),
        ("fleet", in_play, fleet()),
        ("fleet, wider", in_play, wide),
    ]


def test_the_former_jinja_says_the_same_rollout():
    variants = _hv_variants()
    knobs = [(rolling, canary) for rolling in (False, True) for canary in (0, 1, 2, "1")]
    cases = [(OLD_MORE["rollout"], {"hosts": hosts, "hv": hv, "maintenance_canary": canary,
                                    "_mw_rollout": "rolling" if rolling else "batches"})
             for _name, hosts, hv in variants for rolling, canary in knobs]
    for _name, hosts, hv in variants:
        waits = {h: v["driver_upgrade_preflight"]["longest_wait_s"] for h, v in hv.items()
                 if (v.get("driver_upgrade_preflight") or {}).get("longest_wait_s") is not None}
        cases += [(OLD["unfinished"], {"hosts": hosts, "hv": hv}),
                  (OLD["ttl"], {"hosts": hosts, "waits": waits, "ttl": 600})]
    got = render(cases)
    want = []
    for _name, hosts, hv in variants:
        for rolling, canary in knobs:
            out = mw.rollout(hosts, hv, rolling=rolling, canary=canary, lease_ttl=600)
            want.append({k: out[k] for k in ("parallel", "lanes", "serial")})
    for _name, hosts, hv in variants:
        out = mw.rollout(hosts, hv, lease_ttl=600)
        want += [out["found_unfinished"], out["lease_ttl"]]
    assert got == want
    # what the cases cover: no width (all at once), width 1 and 2, lanes in reboot-first order, canary batches
    assert {w["parallel"] for w in want[: len(variants) * len(knobs)]} == {0, 1, 2}
    assert ["lab-node-2", "lab-node-1"] in [w["lanes"] for w in want[: len(variants) * len(knobs)]]


def _plan_variants():
    mixed = fleet()
    mixed["lab-node-3"]["driver_upgrade_result"]["status"] = "skipped"
    mixed["lab-node-1"]["driver_upgrade_preflight"] = None  # default({}, true): no pod rules
    mixed["lab-node-1"]["driver_upgrade_reboot_allowed"] = "Yes"
    del mixed["lab-node-2"]["driver_upgrade_result"]["plan"]
    return [([], fleet()), (["lab-node-1"], fleet()), (["lab-npu-0"], fleet()), (["lab-gone"], fleet()),
            (HOSTS, fleet()), (HOSTS, mixed)]


def test_the_former_jinja_says_the_same_plan_rows():
    cases = [(OLD_MORE["plan_rows"], {"hosts": hosts, "hv": hv, "_mw_workload_refusal": refusal})
             for hosts, hv in _plan_variants() for refusal in ("", "ns/Deployment/a would have no node")]
    got = render(cases)
    want = [mw.plan_rows(hosts, hv, refusal)
            for hosts, hv in _plan_variants() for refusal in ("", "ns/Deployment/a would have no node")]
    assert got == want
    assert {r["status"] for rows in want for r in rows} == {"would-upgrade", "already-at-target", "refused",
                                                            "skipped"}


def test_the_former_jinja_says_the_same_lease_outlook():
    checks = [{}, {"changed": True, "operation": "create", "previous_holder": ""},
              {"changed": True, "operation": "renew", "previous_holder": "ctl/run-1", "expires": "later"},
              {"changed": True, "operation": "take-over", "previous_holder": "ctl-old/run-0"},
              {"failed": True, "operation": "refuse", "previous_holder": "ctl-other/run-7",
               "expires": "2026-12-05T06:00:00Z", "msg": "lease held by ctl-other/run-7"},
              {"failed": True, "msg": "forbidden: leases"}, {"failed": False, "operation": "create"}]
    got = render([(OLD_MORE["lease"], {"_mw_lease_check": c}) for c in checks])
    assert got == [mw.lease_outlook(c) for c in checks]


def test_the_former_jinja_says_the_same_summary():
    ok = {h: {"driver_upgrade_result": record(h, status="upgraded")} for h in ("a", "b")}
    variants = [([], {}), (["lab-node-1"], fleet()), (["lab-gone"], fleet()), (["a", "b"], ok), (HOSTS, fleet())]
    stops = [(None, ""), ("expired at 05:30", ""), (None, "x stranded"), ("expired", "x stranded")]

    def variables(hosts, hv, lease_lost, refusal):
        out = {"hosts": hosts, "hv": hv, "_mw_workload_refusal": refusal}
        return out if lease_lost is None else dict(out, _mw_lease_lost=lease_lost)  # the playbook's "is defined"

    cases, want = [], []
    for hosts, hv in variants:
        for lease_lost, refusal in stops:
            rows = mw.summary_rows(hosts, hv, lease_lost, refusal)
            cases += [(OLD_MORE["stop_reason"] + "{{ _mw_stop_reason | default('the run stopped', true) }}",
                       variables(hosts, hv, lease_lost, refusal)),
                      (OLD_MORE["stop_reason"] + OLD_MORE["summary_rows"], variables(hosts, hv, lease_lost, refusal)),
                      (OLD_MORE["totals"], dict(variables(hosts, hv, lease_lost, refusal), rows=rows))]
            want += [mw.stop_reason(hosts, hv, lease_lost, refusal), rows, mw.summary_totals(rows, lease_lost)]
    assert render(cases) == want
    assert {t["result"] for t in want[2::3]} == {"ok", "failed"}


def test_bool_is_the_bool_filter():
    values = [True, False, "yes", "No", "on", "OFF", "true", "False", "1", "0", 1, 0, 1.0, 0.0, 2, "y", "t", " yes ",
              "", None, [], {}]
    assert render([("{{ v | bool }}", {"v": v}) for v in values]) == [mw._bool(v) for v in values]
    # why not ansible's convert_bool.boolean(strict=False): that one says True for these
    assert [mw._bool(v) for v in ("y", "t", " yes ")] == [False, False, False]


class _HostVars(Mapping):
    """Ansible's hostvars as the filters see it: each ``hostvars[host]`` (variables of the host read and
    templated) and each key of the host's view (that variable templated) counted; ``in`` is free."""

    def __init__(self, data):
        self.data, self.hosts, self.keys = data, Counter(), Counter()

    def __getitem__(self, host):
        self.hosts[host] += 1
        if host not in self.data:
            return object()  # Ansible: an Undefined marker, no mapping
        return _HostVarsVars(self, host, self.data[host])

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


class _HostVarsVars(Mapping):
    def __init__(self, owner, host, data):
        self.owner, self.host, self.data = owner, host, data

    def __getitem__(self, key):
        self.owner.keys[(self.host, key)] += 1
        return self.data[key]

    def __contains__(self, key):
        return key in self.data

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


@pytest.mark.parametrize("call", [
    lambda hosts, hv: mw.rollout(hosts, hv, rolling=False, canary=1, lease_ttl=1800),
    lambda hosts, hv: mw.rollout(hosts, hv, rolling=True),
    mw.workload_changes,
    lambda hosts, hv: mw.plan_rows(hosts, hv, "x"),
    mw.stop_reason,
    mw.summary_rows,
    lambda hosts, hv: mw.summary_rows(hosts, hv, "expired", "x"),
], ids=["rollout", "rollout-rolling", "workload_changes", "plan_rows", "stop_reason", "summary_rows",
        "summary_rows-lease-lost"])
def test_each_host_is_read_once(call):
    hosts = HOSTS + ["lab-unknown"]
    hv = _HostVars(fleet())
    plain = call(hosts, fleet())
    assert call(hosts, hv) == plain  # the same answer through the counting view
    assert hv.hosts == Counter(hosts), "a host's variables read more than once"
    assert max(hv.keys.values()) == 1, "a variable read more than once: %s" % sorted(
        k for k, n in hv.keys.items() if n > 1)
