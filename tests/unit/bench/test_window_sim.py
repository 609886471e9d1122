"""bench/window_sim.py, the discrete-event model of a maintenance window at fleet size.

Expectations are computed here by hand from the scenario (waves of a fixed host time, a controller's
serial cap, the admission limits), or recounted from the hosts' own records, never taken from the
model's summary alone."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("window_sim", ROOT / "bench" / "window_sim.py")
assert _spec is not None and _spec.loader is not None
ws = importlib.util.module_from_spec(_spec)
sys.modules["window_sim"] = ws  # dataclasses look their module up while the class is built
_spec.loader.exec_module(ws)

# no decision time, no overhead, no preflight or fixed costs, a main process that costs nothing: what
# remains is the hosts' fixed work and the limits
FREE = ws.Costs(cap_hosts_per_hour=math.inf, overhead_s=0.0, execs_preflight=0.0, decision_points=())


def ideal(work_s: float = 100.0, **kw) -> ws.Config:
    base = dict(
        costs=FREE,
        work=ws.Work(fixed_s=work_s, reboot_fraction=0.0),
        fail_rate=0.0,
        start_s=0.0,
        end_s=0.0,
        preflight_host_s=0.0,
        release_after=0.0,
        max_unavailable="100%",
    )
    base.update(kw)
    return ws.Config(**base)


def peak(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at once; an interval ending at t is closed before one starting at t."""
    edges = sorted([(a, 1) for a, _b in intervals] + [(b, -1) for _a, b in intervals], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _t, step in edges:
        now += step
        most = max(most, now)
    return most


def test_without_failures_every_host_finishes_exactly_once():
    res = ws.simulate(ws.Config(nodes=300, controllers=3, max_parallel=20, fail_rate=0.0, seed=5))
    assert len(res.hosts) == 300
    assert sorted(h.idx for h in res.hosts) == list(range(300))
    assert [ws.STATE_NAMES[h.state] for h in res.hosts] == ["done"] * 300
    assert all(h.attempts == 1 and len(h.admitted_at) == 1 and h.ended_at > h.admitted_at[0] for h in res.hosts)
    assert res.summary["upgraded"] == 300 and res.summary["never_started"] == 0 and res.summary["failures"] == 0
    # each host in exactly one controller's stride slice: host i in slice i % S
    assert all(h.ctrl == h.idx % 3 for h in res.hosts)


def test_peaks_recounted_from_the_hosts_reach_but_never_exceed_the_limits():
    # 600 nodes, maxUnavailable 5% = 30 < maxParallelUpgrades 40; failed hosts stay cordoned
    cfg = ws.Config(nodes=600, controllers=2, max_parallel=40, max_unavailable="5%", fail_rate=0.02, seed=3)
    res = ws.simulate(cfg)
    end = res.summary["wall_s"] + 1
    in_flight = [(h.admitted_at[0], h.released_at[0]) for h in res.hosts if h.admitted_at]
    unavailable = [(h.admitted_at[0], h.ended_at if h.state == ws.DONE else end) for h in res.hosts if h.admitted_at]
    assert math.ceil(600 * 5 / 100) == 30
    assert peak(in_flight) <= 30 and peak(unavailable) <= 30
    assert peak(unavailable) == 30  # the limit binds: the check above could fail
    assert res.summary["peak_unavailable"] == [peak(unavailable)]
    assert res.summary["peak_in_flight"] == [peak(in_flight)]
    assert res.summary["failures"] >= 1


def test_in_flight_peak_is_max_parallel_across_controllers_and_clusters():
    cfg = ws.Config(nodes=1200, cluster_size=600, controllers=4, max_parallel=25, fail_rate=0.0, seed=2)
    res = ws.simulate(cfg)
    assert res.summary["clusters"] == 2
    for c in (0, 1):
        spans = [(h.admitted_at[0], h.released_at[0]) for h in res.hosts if h.cluster == c]
        assert len(spans) == 600
        assert peak(spans) == 25  # the width, never more, though 4 controllers share it
    assert res.summary["peak_in_flight"] == [25, 25]


def test_over_admission_is_caught_when_the_compare_and_swap_is_removed():
    class NoCas(ws.Sim):
        def write(self, lane, version, t):  # every write wins: no 409
            if lane.host is not None:
                version = self.clusters[lane.host.cluster].version
            super().write(lane, version, t)

    cfg = ws.Config(nodes=200, controllers=2, max_parallel=10, fail_rate=0.0)
    ws.Sim(cfg).run()  # with the check: fine
    with pytest.raises(AssertionError, match="over-admission"):
        NoCas(cfg).run()


def test_one_controller_with_a_tiny_cap_is_bound_by_it():
    # 100 hosts/h: 36 s of the main process per host (50 task executions of 0.72 s: 20 in the
    # preflight, 30 in the lane), 20 lanes, 60 s of work each: the main process never idles
    costs = replace(FREE, cap_hosts_per_hour=100.0, execs_upgraded=50.0, execs_preflight=20.0, overhead_s=21.6)
    res = ws.simulate(ideal(work_s=60.0, nodes=200, controllers=1, max_parallel=20, costs=costs))
    by_hand_h = 200 / 100 + 60 / 3600  # N / cap, then the last host's own work
    assert res.summary["wall_h"] == pytest.approx(by_hand_h, abs=0.002)
    assert res.summary["bound_by"] == "controllers (CPU)"
    # the same with two controllers: each carries half
    two = ws.simulate(ideal(work_s=60.0, nodes=200, controllers=2, max_parallel=20, costs=costs))
    assert two.summary["wall_h"] == pytest.approx(100 / 100 + 60 / 3600, abs=0.002)


def test_with_a_huge_cap_the_width_sets_the_wall_time():
    # (7, 3): the third wave is one host, two of three slots idle for its 250 s: the tail
    for n, width, t, bound in ((95, 10, 100.0, "limits"), (100, 10, 100.0, "limits"), (7, 3, 250.0, "tail")):
        waves = math.ceil(n / width) * t
        # as many lanes as the width: waves of exactly t
        exact = ws.simulate(ideal(work_s=t, nodes=n, controllers=1, max_parallel=width, forks=width))
        assert exact.summary["wall_s"] == pytest.approx(waves, abs=1e-6), (n, width)
        assert exact.summary["bound_by"] == bound
        assert exact.summary["peak_in_flight"] == [min(n, width)]
        # the window's forks (width + 1): the spare lane polls (1, 2, 4, then every 5 s), so a slot it
        # takes may start up to 5 s after it freed
        spare = ws.simulate(ideal(work_s=t, nodes=n, controllers=1, max_parallel=width))
        assert spare.summary["forks_per_controller"] == width + 1
        assert waves <= spare.summary["wall_s"] <= waves + 5.0, (n, width)


def test_failure_budget_zero_one_forced_failure_stops_new_starts_and_lets_the_others_finish():
    # waves of 10 at t = 0, 100, 200; host 25 (third wave) fails halfway, at t = 250
    res = ws.simulate(ideal(nodes=100, controllers=1, max_parallel=10, max_failures=0, fail_hosts=(25,)))
    failed = [h for h in res.hosts if h.state == ws.FAILED]
    assert [h.idx for h in failed] == [25] and failed[0].ended_at == pytest.approx(250.0)
    admitted = [h for h in res.hosts if h.admitted_at]
    assert max(h.admitted_at[-1] for h in admitted) <= 250.0  # nothing started after the failure
    assert len(admitted) == 30
    finished_after = [h for h in admitted if h.state == ws.DONE and h.ended_at > 250.0]
    assert len(finished_after) == 9 and all(h.ended_at == pytest.approx(300.0) for h in finished_after)
    assert res.summary["never_started"] == 70 and res.summary["upgraded"] == 29
    assert res.summary["stopped_at_s"] == pytest.approx(250.0)
    assert res.summary["bound_by"] == "stopped (failures)"
    # a budget of 1 tolerates it: everything else finishes
    tolerant = ws.simulate(ideal(nodes=100, controllers=1, max_parallel=10, max_failures=1, fail_hosts=(25,)))
    assert tolerant.summary["upgraded"] == 99 and tolerant.summary["never_started"] == 0


def test_a_lost_controller_holds_its_slots_until_the_sweep():
    # S=2, width 4, 2 lanes each, 1000 s a host; controller 0 dies at 500 s with 2 nodes in flight,
    # the sweep comes 800 s later (1300 s): until then only 2 slots are left to controller 1
    cfg = ideal(
        work_s=1000.0,
        nodes=40,
        controllers=2,
        forks=2,
        max_parallel=4,
        kill_controller_at=500.0,
        sweep_after=800.0,
        rerun=False,
        trace=True,
    )
    res = ws.simulate(cfg)
    lost = [h for h in res.hosts if h.ctrl == 0 and h.admitted_at]
    assert len(lost) == 2 and all(h.state == ws.INTERRUPTED for h in lost)
    assert all(h.released_at == [1300.0] for h in lost)
    in_flight_between = [n for t, _c, n, _u in res.trace if 500.0 <= t < 1300.0]
    assert in_flight_between and min(in_flight_between) >= 2
    assert max(in_flight_between) == 4  # controller 1's two and the two held ones
    others = [h for h in res.hosts if h.ctrl == 1]
    assert sorted({h.admitted_at[0] for h in others})[:2] == [0.0, 1000.0]
    k = res.summary["controller_lost"]
    assert k["in_flight_at_kill"] == 2 and k["not_started_at_kill"] == 18 and k["hosts_delayed"] == 20
    assert k["slot_s_held_by_lost_controller"] == 2 * 800.0
    assert k["work_s_lost"] == 2 * 500.0
    assert res.summary["never_started"] == 18 and res.summary["interrupted"] == 2
    # rerun: a replacement takes the interrupted hosts first, at the sweep
    again = ws.simulate(replace(cfg, rerun=True))
    redone = [h for h in again.hosts if h.attempts == 2]
    assert len(redone) == 2 and all(h.admitted_at[1] == 1300.0 and h.state == ws.DONE for h in redone)
    assert again.summary["upgraded"] == 40 and again.summary["never_started"] == 0


def test_a_lagging_view_only_adds_waits():
    cfg = ideal(nodes=60, controllers=1, max_parallel=6, forks=6)
    fresh = ws.simulate(cfg).summary
    lagged = ws.simulate(replace(cfg, view_lag=30.0)).summary
    assert fresh["wall_s"] == pytest.approx(1000.0) and fresh["admission"]["waits"] == 0
    # each freed slot looks busy for 30 s: every wave after the first starts 30-35 s late (the polls)
    assert 1000.0 + 9 * 30.0 <= lagged["wall_s"] <= 1000.0 + 9 * 35.0
    assert lagged["admission"]["waits"] > 0 and lagged["peak_in_flight"] == [6]


def test_hosts_at_the_target_cost_the_preflight_only():
    res = ws.simulate(ws.Config(nodes=400, controllers=2, max_parallel=20, fail_rate=0.0, at_target=0.5, seed=8))
    at_target = [h for h in res.hosts if h.state == ws.AT_TARGET]
    assert 150 < len(at_target) < 250 and not any(h.admitted_at for h in at_target)
    assert res.summary["at_target"] == len(at_target) and res.summary["upgraded"] == 400 - len(at_target)


def test_same_seed_same_result_other_seed_other_result():
    cfg = ws.Config(nodes=400, controllers=2, max_parallel=20, seed=11)
    a, b = ws.simulate(cfg).summary, ws.simulate(cfg).summary
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = ws.simulate(replace(cfg, seed=12)).summary
    assert c["wall_s"] != a["wall_s"]


def test_api_requests_per_upgraded_host_and_per_admission():
    res = ws.simulate(ideal(nodes=50, controllers=1, max_parallel=5))
    kinds = res.summary["api"]["by_kind"]
    assert kinds["node_get_patch"] == 50 * 12 * 2  # GET + PATCH per state transition
    assert kinds["node_post"] == 50 * 13
    assert kinds["slot_release"] == 50 * 2  # each claim's entry removed: GET + PUT
    # no decision time: no write ever races another, one PUT per admission
    assert kinds["slot_lease_put"] == 50 and res.summary["admission"]["conflicts_409"] == 0
    # with the measured decision times, lanes that decide at once race: 409s, each costing a PUT
    raced = ws.simulate(replace(ideal(nodes=50, controllers=1, max_parallel=5), costs=ws.Costs()))
    conflicts = raced.summary["admission"]["conflicts_409"]
    assert conflicts > 0 and raced.summary["api"]["by_kind"]["slot_lease_put"] == 50 + conflicts


def test_costs_come_from_the_bench_files_or_say_they_are_fallbacks(tmp_path):
    fallback = ws.load_costs(tmp_path)
    assert fallback.execs_upgraded == 57.0 and fallback.cap_hosts_per_hour == 2850.0
    assert all("fallback" in s for s in fallback.sources)
    (tmp_path / "fleet-summary.json").write_text(
        json.dumps(
            {
                "task_executions_per_upgraded_host": 40.0,
                "task_executions_per_host_at_target": 9,
                "overhead_s_per_reload_host": 10.5,
                "model (not a measurement)": {"control_node_cap_hosts_per_hour": 4000},
            }
        )
    )
    got = ws.load_costs(tmp_path)
    assert (got.execs_upgraded, got.execs_at_target, got.overhead_s, got.cap_hosts_per_hour) == (40, 9, 10.5, 4000)
    assert got.exec_s == pytest.approx(3600 / (4000 * 40))
    assert "fleet-summary.json" in got.sources[0] and "fallback" not in got.sources[0]


def test_quick_cli_writes_the_table_and_the_json(tmp_path, capsys):
    assert ws.main(["--quick", "--out-dir", str(tmp_path), "--seed", "4"]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "window-sim-quick.json").read_text())
    assert len(doc["rows"]) == len(ws.QUICK_NODES) * len(ws.QUICK_CONTROLLERS)
    assert "not a measurement" in doc["model"]
    md = (tmp_path / "window-sim-quick.md").read_text()
    assert md.count("\n| ") - 1 == len(doc["rows"]) and md in out.replace("\r", "")
    for row in doc["rows"]:
        limits = row["limits_per_cluster"][0]
        assert max(row["peak_in_flight"]) <= limits["maxParallelUpgrades"]
        assert max(row["peak_unavailable"]) <= limits["maxUnavailable"]


class Booked(ws.Sim):
    """The model as it is, with the bytes of every request kind kept apart (the summary sums them)."""

    def __init__(self, cfg):
        self.kind_bytes: dict[str, float] = {}
        super().__init__(cfg)

    def api(self, c, t, n, nbytes, kind):
        self.kind_bytes[kind] = self.kind_bytes.get(kind, 0.0) + nbytes
        super().api(c, t, n, nbytes, kind)


def test_polls_and_decision_bytes_by_hand():
    # width 1, two lanes, 100 s a host, decisions cost nothing, the Table never expires: lane A is
    # admitted at 0; lane B decides at 0 and polls after 1, 2, 4, then every 5 s (admission.py via
    # retry.poll_until: 0, 1, 3, 7, 12, ..., 97: 22 waits) and is admitted at 102 on the cached Table,
    # which it reads again first (one more Table and exact-list pair)
    costs = replace(
        FREE,
        exact_lists_bytes=100.0,
        node_bytes=10_000.0,
        table_bytes_per_node=10.0,
        slot_lease_bytes=1000.0,
        table_page=1,
    )
    cfg = ideal(nodes=2, controllers=1, forks=2, max_parallel=1, snapshot_max_age=1e9, costs=costs)
    sim = Booked(cfg)
    res = sim.run()
    a, b = res.hosts
    assert a.admitted_at == [0.0] and b.admitted_at == [102.0] and res.summary["wall_s"] == pytest.approx(202.0)
    assert res.summary["admission"] == {"decisions": 24, "waits": 22, "conflicts_409": 0}
    kinds = res.summary["api"]["by_kind"]
    assert kinds["slot_lease_get"] == 24 and sim.kind_bytes["slot_lease_get"] == 24 * 1000.0
    assert kinds["exact_list"] == 2 * 24 + 2
    # nothing in flight: the empty lists (A's decision, B's last one and its fresh read); one node in
    # flight: in both lists (its label, its cordon), 2 whole Nodes on top of the empty lists
    assert sim.kind_bytes["exact_list"] == 3 * 100.0 + 22 * (100.0 + 2 * 10_000.0)
    # two Table reads (A's cold one, B's fresh one) of 2 nodes at 10 B, in pages of 1 row: 2 GETs each
    assert kinds["table_list"] == 2 * 2 and sim.kind_bytes["table_list"] == 2 * 2 * 10.0
    assert kinds["slot_lease_put"] == 2


def test_a_lost_race_decides_again_at_once():
    # decisions of 0.5 s, width 2: both lanes read the Lease at 0; A (cold Table) writes at 0.5 and
    # releases its entry; B admitted on the cached Table reads it again (0.5 + 0.5 s) and its write at
    # 1.0 is a 409; it decides again at once (no poll), again on the cache plus a fresh read: 2.0
    costs = replace(FREE, decision_points=((1.0, 0.5, 0.5), (2.0, 0.5, 0.5)))
    res = ws.simulate(ideal(nodes=2, controllers=1, forks=2, max_parallel=2, costs=costs))
    a, b = res.hosts
    assert a.admitted_at == [pytest.approx(0.5)] and b.admitted_at == [pytest.approx(2.0)]
    assert res.summary["admission"] == {"decisions": 3, "waits": 0, "conflicts_409": 1}
    kinds = res.summary["api"]["by_kind"]
    assert kinds["slot_lease_put"] == 3 and kinds["table_list"] == 3 and kinds["exact_list"] == 2 * 5
    assert res.summary["wall_s"] == pytest.approx(102.0)


def test_cli_output_is_the_same_on_a_second_run(tmp_path, capsys):
    files = {}
    for run in (1, 2):
        assert ws.main(["--quick", "--out-dir", str(tmp_path), "--seed", "9"]) == 0
        capsys.readouterr()
        files[run] = [(tmp_path / name).read_bytes() for name in ("window-sim-quick.json", "window-sim-quick.md")]
    assert files[1] == files[2]
