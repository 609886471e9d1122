#!/usr/bin/env python
"""A discrete-event simulation of one maintenance window at fleet size (``make simulate``).

THIS IS A MODEL, NOT A MEASUREMENT. Nothing here runs Ansible or talks to a cluster: it replays, with
a seeded ``random.Random``, what the window would do with N nodes (1,000 to 20,000; one cluster per
``--cluster-size`` nodes, each with its own upgradePolicy limits and its own API server) driven by S
controllers (ansible-playbook processes or AWX job slices). Same seed, same inputs: same result.

What is modelled
  * Controllers: controller k owns the stride slice of the sorted hosts (host i goes to slice i % S),
    runs its fleet preflight over it, then F forks = F rolling lanes (host_pinned: a lane takes the
    slice's next host as soon as its host ends), hosts in lane order (the filter ``lane_order``:
    reboot hosts first). Hosts are sorted interleaved across clusters by default (``--order cluster``:
    cluster by cluster, as names with a cluster prefix sort).
  * Admission, as plugins/module_utils/upgrade/admission.py does it: a lane's decision reads the
    cluster's slot Lease, the exact lists and the node Table (cached per controller and cluster for 15
    s; a decision that admits on the cached Table reads it again), then writes the slot Lease with the
    resourceVersion it read. A write that finds the Lease changed since its read (any other admission
    or slot release in between) is a 409: the lane decides again at once. A lane that must wait polls
    again after 1, 2, 4, 5, 5, ... s. The limits maxParallelUpgrades (in flight: admitted, not ended)
    and maxUnavailable (in flight + cordoned: failed or interrupted hosts stay cordoned) are per
    cluster and shared by all controllers; the compare-and-swap means they are never exceeded, which
    the model asserts at every admission. ``--view-lag`` makes decisions see nodes freed in the last
    seconds as still busy (a lagging view): it can only add waits, never an admission (default 0:
    the real decision reads the nodes in an upgrade and the cordoned ones fresh; only "NotReady of
    its own", which this model has no nodes of, comes from the 15 s Table). A wait that sees no node
    in flight for 600 s ends (admission.STALLED_TIMEOUT): that host fails, uncordoned.
  * Per host: the work (drain, install, module reload or, for a fraction, a reboot: lognormal; a few %
    of hosts 5-10x slower), Ansible's per-lane overhead, and the controller's main process as one
    serial server: every task execution costs it a fixed CPU time, so a controller upgrades at most
    ``control_node_cap_hosts_per_hour`` hosts an hour whatever its forks.
  * Failures: each host fails with probability p at a uniform point of its run (stays cordoned); once
    more than ``--max-failures`` failed, no lane anywhere starts a host (a claim made meanwhile is
    given back), hosts in flight finish.
  * Losing a controller (``--kill-controller-at``): its in-flight nodes keep their slots until a
    survivor sweeps them (``--sweep-after``, default the participant Lease's TTL); the sweep frees
    their maxParallelUpgrades slots (they stay cordoned), and (unless ``--no-rerun``) a replacement
    controller reruns the rest of the slice, the interrupted hosts first, after its own preflight.
  * API load per API server: every request of the admission path (the Table in pages of 5,000 rows; the
    exact lists return the whole Nodes in an upgrade, twice - by label and as cordoned - and the other
    cordoned ones once), node
    GET/PATCH per state transition (12 per upgraded host) plus the drain's POSTs, slot releases, and
    the renewals of the window Lease and the participant Leases every TTL/3; requests/s mean and peak
    (10 s buckets), bytes.

Inputs: measured vs assumed
  * Measured (on the 2-core lab, read from build/bench/ when there, else the constants below, and the
    output says which): task executions per upgraded host and per host at the target, Ansible's
    overhead per reload lane (fleet-summary.json, ``make bench-fleet``); bytes of the node Table per
    node, of the slot Lease, of the (empty) exact lists, of a whole Node, and one admission decision's
    seconds cold and warm at 1,000 and 10,000 Nodes (admission-snapshot.json); the node requests per
    upgraded host (bench_node_upgrade: GET 13, PATCH 13, POST 13 for one node; booked here as 12
    transitions of GET + PATCH and 13 POSTs). Caveats on these: the controller cap is derived, not
    measured (fleet-summary.json files it under "model (not a measurement)": the measured task
    executions x 22 ms, a constant of bench/fleet_window.py); a whole Node's ~23 KB is the bench's
    synthetic Node padded to BENCH_NODE_KB=20, not a real GPU node's (node_snapshot.py guesses ~50 KB);
    the decision seconds were measured by check_admission with no slot Lease read and no node in an
    upgrade (exact lists of 176 bytes), so at width 50 (~100 whole Nodes, ~2.3 MB, in the exact lists)
    a real decision is slower than booked here - the model is optimistic on the admission path.
  * Assumed (not measured anywhere): the work distributions (no real GPU host was timed), the slow
    tail, the failure rate, the split of task executions between preflight (25) and lane, the
    preflight's per-host wall time on the workers (5 s), the window's fixed start (20 s) and end
    (10 s), the participant Lease (not built yet; TTL 120 s) and what a sweep does, the slot release
    50 ms after the claim, and that the control node has cores enough for its forks' workers (a
    module call costs ~1 s of worker CPU on the lab, a warm decision at 10,000 Nodes 0.57 s of it per
    poll; a controller short of cores is slower than this).
  * Differs from the code, knowingly: the sweep and its freeing of maxParallelUpgrades slots are of
    the participant Lease, not built; today an interrupted node's state label (a state of
    IN_PROGRESS_STATES) keeps counting against both limits (admission._taken) until a rerun resumes
    it, and the rerun resumes from that label (states.py) where the model redoes the host's whole work.
    A host that fails before its host work is aborted, uncordoned, by the code (finish.phase_fail);
    the model keeps every failed host cordoned (pessimistic on maxUnavailable only).
  * Not modelled: the API server's latency under load (a request costs nothing beyond the measured
    decision seconds, whatever the rate), nodes unavailable for reasons of their own, PDBs beyond the
    drain's lognormal, the worker processes' CPU.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "build" / "bench"
BUCKET_S = 10.0  # API requests/s peaks are over buckets of this many seconds

# Fallbacks when build/bench/*.json is absent (the values measured when this model was written).
FALLBACK_EXECS_UPGRADED = 57.0
FALLBACK_EXECS_AT_TARGET = 16.0
FALLBACK_OVERHEAD_S = 14.0
FALLBACK_CAP_HOSTS_PER_HOUR = 2850.0

PENDING, ADMITTED, DONE, FAILED, HELD, INTERRUPTED, AT_TARGET, STALLED = range(8)
STATE_NAMES = ("pending", "admitted", "done", "failed", "held", "interrupted", "at_target", "stalled")
# event kinds
EV_START, EV_DECIDE, EV_WRITE, EV_RELEASE, EV_END, EV_KILL, EV_SWEEP = range(7)


@dataclass(frozen=True)
class Costs:
    """Per-host and per-request costs; see the module docstring for which are measured."""

    execs_upgraded: float = FALLBACK_EXECS_UPGRADED
    execs_at_target: float = FALLBACK_EXECS_AT_TARGET
    execs_preflight: float = 25.0  # assumed: of an upgraded host's task executions, those of its fleet preflight
    overhead_s: float = FALLBACK_OVERHEAD_S  # Ansible's wall time per lane beyond the work itself
    cap_hosts_per_hour: float = FALLBACK_CAP_HOSTS_PER_HOUR  # one controller's main process
    table_bytes_per_node: float = 187.0
    node_bytes: float = 22923.0
    slot_lease_bytes: float = 632.0
    exact_lists_bytes: float = 176.0
    post_bytes: float = 1000.0  # assumed: an eviction's or an Event's response
    table_page: int = 5000  # rows per Table request (k8s/node_snapshot.py PAGE): 10,000 Nodes are 2 GETs
    # (nodes, warm decision s, cold decision s): one admission decision's read-to-write time
    decision_points: tuple[tuple[float, float, float], ...] = ((1000.0, 0.07, 0.175), (10000.0, 0.571, 1.379))
    sources: tuple[str, ...] = ("fallback constants: build/bench/fleet-summary.json, admission-snapshot.json absent",)

    @property
    def exec_s(self) -> float:
        """Seconds of the controller's main process per task execution (from the cap)."""
        return 3600.0 / (self.cap_hosts_per_hour * self.execs_upgraded)

    def decision_s(self, nodes: int, cold: bool) -> float:
        """One decision's seconds at ``nodes`` Nodes: linear through the measured points, never < 0."""
        pts = self.decision_points
        if not pts:
            return 0.0
        (n0, warm0, cold0), (n1, warm1, cold1) = pts[0], pts[-1]
        y0, y1 = (cold0, cold1) if cold else (warm0, warm1)
        if n1 == n0:
            return max(0.0, y0)
        return max(0.0, y0 + (y1 - y0) * (nodes - n0) / (n1 - n0))


@dataclass(frozen=True)
class Work:
    """The host's own work, assumed: lognormal (median s, sigma) per step; ``fixed_s`` for tests."""

    drain: tuple[float, float] = (60.0, 0.8)
    install: tuple[float, float] = (90.0, 0.4)
    reload: tuple[float, float] = (30.0, 0.3)
    reboot: tuple[float, float] = (420.0, 0.25)
    reboot_fraction: float = 0.2
    slow_fraction: float = 0.03
    slow_factor: tuple[float, float] = (5.0, 10.0)
    fixed_s: Optional[float] = None  # every host's work exactly this, no tail (tests)


@dataclass(frozen=True)
class Config:
    nodes: int = 10000
    controllers: int = 1
    max_parallel: int = 50
    max_unavailable: str = "10%"
    forks: Optional[int] = None  # per controller; None: ceil(effective width of all clusters / S) + 1
    cluster_size: int = 10000
    order: str = "interleaved"  # or "cluster"
    fail_rate: float = 0.002
    max_failures: int = 100
    fail_hosts: tuple[int, ...] = ()  # forced failures (sorted host index), at fail_at of their run
    fail_at: float = 0.5
    at_target: float = 0.0  # fraction of hosts already at the target (preflight only)
    kill_controller_at: Optional[float] = None  # seconds after the window's start
    kill_controller: int = 0
    sweep_after: Optional[float] = None  # None: participant_ttl
    rerun: bool = True
    participant_ttl: float = 120.0
    window_lease_ttl: float = 1800.0
    view_lag: float = 0.0
    snapshot_max_age: float = 15.0
    poll_first: float = 1.0
    poll_cap: float = 5.0
    stalled_timeout: float = 600.0  # admission.STALLED_TIMEOUT: a wait ends when nothing has moved this long
    release_after: float = 0.05
    start_s: float = 20.0
    end_s: float = 10.0
    preflight_host_s: float = 5.0
    transitions: int = 12
    node_posts: int = 13
    seed: int = 1
    trace: bool = False
    work: Work = field(default_factory=Work)
    costs: Costs = field(default_factory=Costs)


def unavailable_limit(value: str, nodes: int) -> int:
    """maxUnavailable as a count: a percent rounded up, never below 1 (upgrade/policy.py)."""
    text = str(value).strip()
    count = math.ceil(nodes * float(text[:-1]) / 100.0) if text.endswith("%") else int(text)
    return max(1, count)


def _bench_json(bench_dir: Path, name: str) -> Optional[dict[str, Any]]:
    try:
        return json.loads((bench_dir / name).read_text())
    except (OSError, ValueError):
        return None


def load_costs(bench_dir: Path = BENCH_DIR) -> Costs:
    """Costs from build/bench/fleet-summary.json and admission-snapshot.json; fallbacks otherwise."""
    kw: dict[str, Any] = {}
    sources: list[str] = []
    summary = _bench_json(bench_dir, "fleet-summary.json")
    if summary:
        model = summary.get("model") or summary.get("model (not a measurement)") or {}
        pairs = (
            ("execs_upgraded", summary.get("task_executions_per_upgraded_host")),
            ("execs_at_target", summary.get("task_executions_per_host_at_target")),
            ("overhead_s", summary.get("overhead_s_per_reload_host")),
            ("cap_hosts_per_hour", model.get("control_node_cap_hosts_per_hour")),
        )
        got = [k for k, v in pairs if isinstance(v, (int, float)) and v > 0]
        kw.update({k: float(v) for k, v in pairs if k in got})
        missing = [k for k, _v in pairs if k not in got]
        sources.append(
            "fleet-summary.json: %s" % ", ".join(got)
            + ("; fallback constants for %s" % ", ".join(missing) if missing else "")
        )
    else:
        sources.append("fallback constants (no build/bench/fleet-summary.json): task executions, overhead, cap")
    snap = _bench_json(bench_dir, "admission-snapshot.json")
    sizes = sorted((snap or {}).get("sizes") or [], key=lambda s: s.get("nodes", 0))
    try:
        big = sizes[-1]
        kw["table_bytes_per_node"] = float(big["table"]["bytes_per_node"])
        kw["node_bytes"] = float(big["full_list"]["bytes"]) / float(big.get("vendor_nodes_listed") or big["nodes"])
        kw["slot_lease_bytes"] = float(big["slot_lease_bytes"])
        kw["exact_lists_bytes"] = float(big["exact_lists"]["bytes"])
        kw["decision_points"] = tuple(
            (
                float(s["nodes"]),
                float(s["decision_seconds"]["snapshot_warm"]),
                float(s["decision_seconds"]["snapshot_cold"]),
            )
            for s in (sizes[0], sizes[-1])
        )
        sources.append("admission-snapshot.json: bytes and decision seconds at %s Nodes" % [s["nodes"] for s in sizes])
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
        sources.append("fallback constants (no usable build/bench/admission-snapshot.json): bytes, decision seconds")
    return Costs(sources=tuple(sources), **kw)


class Host:
    __slots__ = (
        "idx",
        "cluster",
        "ctrl",
        "qidx",
        "reboot",
        "slow",
        "phases",
        "work",
        "fail",
        "fail_frac",
        "state",
        "cordoned",
        "attempts",
        "admitted_at",
        "ended_at",
        "released_at",
        "ml_end",
        "lane",
    )

    def __init__(self, cluster: int) -> None:
        self.idx = -1
        self.cluster = cluster
        self.ctrl = -1
        self.qidx = 0
        self.reboot = False
        self.slow = False
        self.phases: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.work = 0.0
        self.fail = False
        self.fail_frac = 0.0
        self.state = PENDING
        self.cordoned = False
        self.attempts = 0
        self.admitted_at: list[float] = []
        self.ended_at: Optional[float] = None
        self.released_at: list[float] = []
        self.ml_end = 0.0
        self.lane: Optional[Lane] = None


class Cluster:
    def __init__(self, cid: int, nodes: int, max_parallel: int, max_unavailable: int) -> None:
        self.cid = cid
        self.nodes = nodes
        self.max_parallel = max_parallel
        self.max_unavailable = max_unavailable
        self.width = min(max_parallel, max_unavailable)
        self.version = 0
        self.in_flight = 0
        self.unavailable = 0
        self.peak_in_flight = 0
        self.peak_unavailable = 0
        self.freed_in_flight: list[float] = []
        self.freed_unavailable: list[float] = []
        self.seeking = 0  # lanes holding a host of this cluster not admitted yet
        # integrals over time: slots in flight; idle slots some lane asks for (deciding, polling, lost a
        # race: "admission"); idle slots no lane asks for (no lane has a host for them: "controllers")
        self.area = 0.0
        self.contended = 0.0
        self.starved = 0.0
        self.area_t = 0.0
        self.last_admit_t = 0.0
        self.at_last_admit = (0.0, 0.0, 0.0)
        self.buckets: dict[int, int] = {}
        self.requests = 0
        self.bytes = 0.0
        self.decisions = 0
        self.conflicts = 0
        self.waits = 0

    def advance(self, t: float) -> None:
        dt = t - self.area_t
        if dt > 0:
            idle = max(0, self.width - self.in_flight)
            asked = min(idle, self.seeking)
            self.area += self.in_flight * dt
            self.contended += asked * dt
            self.starved += (idle - asked) * dt
        self.area_t = t

    def seek(self, t: float, n: int) -> None:
        self.advance(t)
        self.seeking += n


class Ctrl:
    def __init__(self, cid: int, name: str, queue: list[Host], forks: int, t0: float) -> None:
        self.cid = cid
        self.name = name
        self.queue = queue
        self.qpos = 0
        self.forks = forks
        self.t0 = t0
        self.dead = False
        self.lanes: list[Lane] = []
        self.lanes_live = 0
        self.lanes_at = t0
        self.ml_free = t0
        self.ml_busy = 0.0
        self.end: Optional[float] = None
        self.running: set[Host] = set()
        self.cache_t: dict[int, float] = {}
        self.admitted = 0


class Lane:
    __slots__ = ("ctrl", "host", "delay", "stalled_since")

    def __init__(self, ctrl: Ctrl) -> None:
        self.ctrl = ctrl
        self.host: Optional[Host] = None
        self.delay = 0.0
        self.stalled_since: Optional[float] = None


@dataclass
class Result:
    summary: dict[str, Any]
    hosts: list[Host]
    trace: list[tuple[float, int, int, int]]


def _lognormal(rng: random.Random, spec: tuple[float, float]) -> float:
    median, sigma = spec
    return median * math.exp(rng.gauss(0.0, sigma)) if sigma > 0 else median


def build_fleet(cfg: Config) -> tuple[list[Cluster], list[Host]]:
    """Clusters and hosts in the sorted order (host.idx); the draws go cluster by cluster, node by
    node, a fixed number per host, so a host's work does not depend on S, the order or the rates."""
    if cfg.nodes < 1 or cfg.controllers < 1 or cfg.max_parallel < 1:
        raise ValueError("nodes, controllers and max_parallel must be >= 1")
    rng = random.Random(cfg.seed)
    k = max(1, math.ceil(cfg.nodes / cfg.cluster_size))
    sizes = [cfg.nodes // k + (1 if c < cfg.nodes % k else 0) for c in range(k)]
    clusters = [Cluster(c, n, cfg.max_parallel, unavailable_limit(cfg.max_unavailable, n)) for c, n in enumerate(sizes)]
    w = cfg.work
    per_cluster: list[list[Host]] = []
    for c, n in enumerate(sizes):
        row = []
        for _j in range(n):
            h = Host(c)
            u_reboot, u_slow, u_factor, u_fail, u_frac, u_target = (rng.random() for _draw in range(6))
            h.reboot = u_reboot < w.reboot_fraction
            drain, install = _lognormal(rng, w.drain), _lognormal(rng, w.install)
            step = _lognormal(rng, w.reboot if h.reboot else w.reload)
            if w.fixed_s is not None:
                third = w.fixed_s / 3.0
                h.phases = (third, third, w.fixed_s - 2 * third)
            else:
                h.slow = u_slow < w.slow_fraction
                factor = w.slow_factor[0] + (w.slow_factor[1] - w.slow_factor[0]) * u_factor if h.slow else 1.0
                h.phases = (drain * factor, install * factor, step * factor)
            h.work = sum(h.phases)
            h.fail = u_fail < cfg.fail_rate
            h.fail_frac = u_frac
            if u_target < cfg.at_target:
                h.state = AT_TARGET
            row.append(h)
        per_cluster.append(row)
    if cfg.order == "cluster":
        hosts = [h for row in per_cluster for h in row]
    elif cfg.order == "interleaved":
        hosts = [row[j] for j in range(max(sizes)) for row in per_cluster if j < len(row)]
    else:
        raise ValueError("order: interleaved or cluster, not %r" % cfg.order)
    for i, h in enumerate(hosts):
        h.idx = i
    for i in cfg.fail_hosts:
        hosts[i].fail, hosts[i].fail_frac = True, cfg.fail_at
    return clusters, hosts


def lane_order(hosts: Iterable[Host]) -> list[Host]:
    """The window's lane order (plugins/filter/rollout.py): reboot hosts first, then the others."""
    hosts = list(hosts)
    return [h for h in hosts if h.reboot] + [h for h in hosts if not h.reboot]


class Sim:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.costs = cfg.costs
        self.clusters, self.hosts = build_fleet(cfg)
        self.heap: list[tuple[float, int, int, Any, Any]] = []
        self.seq = 0
        self.stopped_at: Optional[float] = None
        self.failures = 0
        self.kinds: dict[str, int] = {}
        self.trace: list[tuple[float, int, int, int]] = []
        self.lane_ml = max(0.0, self.costs.execs_upgraded - self.costs.execs_preflight) * self.costs.exec_s
        self.nonml = max(0.0, self.costs.overhead_s - self.lane_ml)
        s = cfg.controllers
        width = sum(c.width for c in self.clusters)
        self.forks = cfg.forks if cfg.forks else math.ceil(width / s) + 1
        self.ctrls: list[Ctrl] = []
        for k in range(s):
            queue = lane_order(h for h in self.hosts[k::s])
            for q, h in enumerate(queue):
                h.ctrl, h.qidx = k, q
            at_target = [h for h in queue if h.state == AT_TARGET]
            ctrl = Ctrl(k, "c%d" % k, [h for h in queue if h.state != AT_TARGET], self.forks, cfg.start_s)
            self._preflight(ctrl, len(at_target))
            self.ctrls.append(ctrl)
        self.initial = list(self.ctrls)
        first_lane = min(c.lanes_at for c in self.ctrls)
        for cl in self.clusters:
            cl.area_t = first_lane  # the slots count from the first lane's start
        self.kill: dict[str, Any] = {}

    # ---- plumbing -------------------------------------------------------------------------------
    def push(self, t: float, kind: int, a: Any = None, b: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def api(self, c: int, t: float, n: int, nbytes: float, kind: str) -> None:
        cl = self.clusters[c]
        b = int(t // BUCKET_S)
        cl.buckets[b] = cl.buckets.get(b, 0) + n
        cl.requests += n
        cl.bytes += nbytes
        self.kinds[kind] = self.kinds.get(kind, 0) + n

    def _preflight(self, ctrl: Ctrl, at_target: int) -> None:
        """The controller's fleet preflight over its hosts: main-process time (serial) or the
        workers' wall time over its forks, whichever is longer; the lanes start after it."""
        co = self.costs
        n = len(ctrl.queue)
        ml = (n * co.execs_preflight + at_target * co.execs_at_target) * co.exec_s
        workers = (n + at_target) * self.cfg.preflight_host_s / ctrl.forks
        ctrl.ml_free = ctrl.t0 + ml
        ctrl.ml_busy += ml
        ctrl.lanes_at = ctrl.t0 + max(ml, workers)
        self.push(ctrl.lanes_at, EV_START, ctrl)

    def _log(self, t: float, cl: Cluster) -> None:
        if self.cfg.trace:
            self.trace.append((t, cl.cid, cl.in_flight, cl.unavailable))

    # ---- the window -----------------------------------------------------------------------------
    def run(self) -> Result:
        cfg = self.cfg
        if cfg.kill_controller_at is not None:
            self.push(cfg.kill_controller_at, EV_KILL, self.ctrls[cfg.kill_controller])
        heap = self.heap
        while heap:
            t, _seq, kind, a, b = heapq.heappop(heap)
            if kind == EV_DECIDE:
                self.decide(a, t)
            elif kind == EV_WRITE:
                self.write(a, b, t)
            elif kind == EV_END:
                self.end(a, b, t)
            elif kind == EV_RELEASE:
                self.release(a, t)
            elif kind == EV_START:
                self.start(a, t)
            elif kind == EV_KILL:
                self.kill_ctrl(a, t)
            elif kind == EV_SWEEP:
                self.sweep(a, b, t)
        return self.result()

    def start(self, ctrl: Ctrl, t: float) -> None:
        if ctrl.dead:
            return
        for _f in range(ctrl.forks):
            lane = Lane(ctrl)
            ctrl.lanes.append(lane)
            ctrl.lanes_live += 1
        for lane in list(ctrl.lanes):
            self.next_host(lane, t)

    def lane_end(self, lane: Lane, t: float) -> None:
        ctrl = lane.ctrl
        if lane.host is not None and lane.host.state == PENDING:
            self.clusters[lane.host.cluster].seek(t, -1)
        lane.host = None
        ctrl.lanes_live -= 1
        if ctrl.lanes_live == 0:
            ctrl.end = t

    def next_host(self, lane: Lane, t: float) -> None:
        ctrl = lane.ctrl
        if ctrl.dead:
            return
        if self.stopped_at is not None or ctrl.qpos >= len(ctrl.queue):
            self.lane_end(lane, t)
            return
        lane.host = ctrl.queue[ctrl.qpos]
        ctrl.qpos += 1
        self.clusters[lane.host.cluster].seek(t, 1)
        lane.delay = self.cfg.poll_first
        lane.stalled_since = None
        self.decide(lane, t)

    def _lagged(self, freed: list[float], t: float) -> int:
        lag = self.cfg.view_lag
        if lag <= 0:
            return 0
        n = 0
        for x in reversed(freed):
            if x <= t - lag:
                break
            n += 1
        return n

    def _table_pages(self, cl: Cluster) -> int:
        """GETs of one Table read: pages of ``table_page`` rows (node_snapshot._read_table)."""
        return max(1, math.ceil(cl.nodes / max(1, self.costs.table_page)))

    def decide(self, lane: Lane, t: float) -> None:
        """One admission decision (wait_admission's probe): read the slot Lease, the nodes, decide."""
        ctrl, h = lane.ctrl, lane.host
        if ctrl.dead or h is None:
            return
        if self.stopped_at is not None:  # stop() is asked before every decision
            self.lane_end(lane, t)
            return
        co, cl = self.costs, self.clusters[h.cluster]
        cl.decisions += 1
        version = cl.version
        inflight_nodes = cl.in_flight * 2 + (cl.unavailable - cl.in_flight)  # upgrading ones are in both lists
        exact_bytes = co.exact_lists_bytes + inflight_nodes * co.node_bytes
        self.api(cl.cid, t, 1, co.slot_lease_bytes, "slot_lease_get")
        self.api(cl.cid, t, 2, exact_bytes, "exact_list")
        cold = t - ctrl.cache_t.get(cl.cid, -1e18) > self.cfg.snapshot_max_age
        if cold:
            self.api(cl.cid, t, self._table_pages(cl), co.table_bytes_per_node * cl.nodes, "table_list")
            ctrl.cache_t[cl.cid] = t
        dur = co.decision_s(cl.nodes, cold)
        seen_in = cl.in_flight + self._lagged(cl.freed_in_flight, t)
        seen_un = cl.unavailable + self._lagged(cl.freed_unavailable, t)
        if seen_in + 1 > cl.max_parallel or seen_un + (0 if h.cordoned else 1) > cl.max_unavailable:
            cl.waits += 1
            if cl.in_flight:  # some node is upgrading: the wait goes on
                lane.stalled_since = None
            elif lane.stalled_since is None:
                lane.stalled_since = t
            elif t - lane.stalled_since >= self.cfg.stalled_timeout:
                self.stalled(lane, h, cl, t)  # the limits are held by cordoned nodes no lane frees
                return
            self.push(t + dur + lane.delay, EV_DECIDE, lane)
            lane.delay = min(self.cfg.poll_cap, lane.delay * 2)
            return
        if not cold:  # admitted on the cached Table: decide again on a fresh read before the write
            self.api(cl.cid, t + dur, self._table_pages(cl), co.table_bytes_per_node * cl.nodes, "table_list")
            self.api(cl.cid, t + dur, 2, exact_bytes, "exact_list")
            ctrl.cache_t[cl.cid] = t + dur
            dur += co.decision_s(cl.nodes, True)
        if dur <= 0:
            self.write(lane, version, t)
        else:
            self.push(t + dur, EV_WRITE, lane, version)

    def _failed(self, t: float) -> None:
        self.failures += 1
        if self.failures > self.cfg.max_failures and self.stopped_at is None:
            self.stopped_at = t

    def stalled(self, lane: Lane, h: Host, cl: Cluster, t: float) -> None:
        """Not admitted: nothing was changed, but the host failed (start.py's UpgradeFailed)."""
        cl.seek(t, -1)
        h.state = STALLED
        h.ended_at = t
        self._failed(t)
        lane.host = None
        self.next_host(lane, t)

    def write(self, lane: Lane, version: int, t: float) -> None:
        """The slot Lease PUT with the resourceVersion read: 409 if anything wrote since."""
        ctrl, h = lane.ctrl, lane.host
        if ctrl.dead or h is None:
            return
        co, cl = self.costs, self.clusters[h.cluster]
        self.api(cl.cid, t, 1, co.slot_lease_bytes, "slot_lease_put")
        if cl.version != version:
            cl.conflicts += 1
            self.decide(lane, t)  # AGAIN: decide again at once
            return
        cl.version += 1
        if self.stopped_at is not None:  # the window stopped while this claim was made: give it back
            self.api(cl.cid, t, 2, 2 * co.slot_lease_bytes, "slot_release")
            cl.version += 1
            self.lane_end(lane, t)
            return
        self.admit(lane, h, cl, t)
        if self.cfg.release_after <= 0:
            self.release(cl, t)
        else:
            self.push(t + self.cfg.release_after, EV_RELEASE, cl)

    def release(self, cl: Cluster, t: float) -> None:
        """The winner labels its node, then removes its entry from the slot Lease (GET + PUT)."""
        self.api(cl.cid, t, 2, 2 * self.costs.slot_lease_bytes, "slot_release")
        cl.version += 1

    def admit(self, lane: Lane, h: Host, cl: Cluster, t: float) -> None:
        cl.advance(t)
        cl.in_flight += 1
        cl.seeking -= 1
        if not h.cordoned:
            cl.unavailable += 1
            h.cordoned = True
        assert cl.in_flight <= cl.max_parallel, "over-admission: in flight %d > maxParallelUpgrades %d" % (
            cl.in_flight,
            cl.max_parallel,
        )
        assert cl.unavailable <= cl.max_unavailable, "over-admission: unavailable %d > maxUnavailable %d" % (
            cl.unavailable,
            cl.max_unavailable,
        )
        cl.peak_in_flight = max(cl.peak_in_flight, cl.in_flight)
        cl.peak_unavailable = max(cl.peak_unavailable, cl.unavailable)
        cl.last_admit_t, cl.at_last_admit = t, (cl.area, cl.contended, cl.starved)
        self._log(t, cl)
        ctrl = lane.ctrl
        ctrl.admitted += 1
        ctrl.running.add(h)
        h.state = ADMITTED
        h.attempts += 1
        h.admitted_at.append(t)
        h.lane = lane
        ml_start = max(t, ctrl.ml_free)
        h.ml_end = ctrl.ml_free = ml_start + self.lane_ml
        ctrl.ml_busy += self.lane_ml
        run_s = self.nonml + h.work
        end = h.ml_end + (h.fail_frac * run_s if h.fail else run_s)
        self.push(end, EV_END, h, h.attempts)

    def _book_host(self, h: Host, upto: Optional[float], failed: bool) -> None:
        """The node's requests of this attempt up to ``upto`` (None: all of them): GET + PATCH per
        state transition, the drain's POSTs, booked at the step boundaries they belong to."""
        co, cfg = self.costs, self.cfg
        drain, install, step = h.phases
        m = h.ml_end
        t1 = m + self.nonml + drain
        t2 = t1 + install
        t3 = t2 + step
        rest = max(0, cfg.transitions - 1)
        # transitions: 1 at the claim, then 4/12 at the cordon, 2/12 after drain, install, reload; the uncordon
        cordon, step_n = rest * 4 // 11, rest * 2 // 11
        split = [(h.admitted_at[-1], 1), (m, cordon), (t1, step_n), (t2, step_n), (t3, step_n)]
        split.append((t3, rest - cordon - 3 * step_n))
        for when, n in split:
            if (upto is None or when <= upto) and n:
                self.api(h.cluster, when, 2 * n, 2 * n * co.node_bytes, "node_get_patch")
        if (upto is None or m <= upto) and cfg.node_posts:
            self.api(h.cluster, m, cfg.node_posts, cfg.node_posts * co.post_bytes, "node_post")
        if failed and upto is not None:
            self.api(h.cluster, upto, 2, 2 * co.node_bytes, "node_get_patch")

    def end(self, h: Host, attempt: int, t: float) -> None:
        if h.state != ADMITTED or h.attempts != attempt:
            return  # its controller was lost meanwhile
        cl = self.clusters[h.cluster]
        cl.advance(t)
        cl.in_flight -= 1
        cl.freed_in_flight.append(t)
        h.ended_at = t
        h.released_at.append(t)
        lane = h.lane
        assert lane is not None
        lane.ctrl.running.discard(h)
        self._book_host(h, t if h.fail else None, h.fail)
        if h.fail:
            h.state = FAILED  # stays cordoned: still unavailable
            self._failed(t)
        else:
            h.state = DONE
            cl.unavailable -= 1
            h.cordoned = False
            cl.freed_unavailable.append(t)
        self._log(t, cl)
        lane.host = None
        self.next_host(lane, t)

    def kill_ctrl(self, ctrl: Ctrl, t: float) -> None:
        """The controller dies: its in-flight nodes keep their slots; its lanes and queue stop."""
        if ctrl.dead or (ctrl.end is not None and ctrl.end <= t):
            self.kill = {"controller": ctrl.name, "at_s": t, "note": "it had ended already"}
            return
        ctrl.dead = True
        ctrl.end = t
        held = sorted(ctrl.running, key=lambda x: x.qidx)
        for h in held:
            h.state = HELD
            self._book_host(h, t, False)
        waiting = [ln.host for ln in ctrl.lanes if ln.host is not None and ln.host.state == PENDING]
        for h in waiting:
            self.clusters[h.cluster].seek(t, -1)
        remaining = sorted(waiting, key=lambda x: x.qidx) + ctrl.queue[ctrl.qpos :]
        sweep_after = self.cfg.sweep_after if self.cfg.sweep_after is not None else self.cfg.participant_ttl
        self.kill = {
            "controller": ctrl.name,
            "at_s": t,
            "sweep_at_s": t + sweep_after,
            "in_flight_at_kill": len(held),
            "not_started_at_kill": len(remaining),
            "hosts_delayed": len(held) + len(remaining),
            "slot_s_held_by_lost_controller": len(held) * sweep_after,
            "work_s_lost": round(sum(t - h.admitted_at[-1] for h in held), 1),
            "rerun": self.cfg.rerun,
        }
        self.push(t + sweep_after, EV_SWEEP, ctrl, (held, remaining))

    def sweep(self, ctrl: Ctrl, lost: tuple[list[Host], list[Host]], t: float) -> None:
        """A survivor sweeps the lost controller: its nodes' slots go (they stay cordoned); with
        ``rerun`` a replacement controller takes the rest of the slice, the interrupted hosts first."""
        held, remaining = lost
        for h in held:
            cl = self.clusters[h.cluster]
            cl.advance(t)
            cl.in_flight -= 1
            cl.freed_in_flight.append(t)
            h.state = INTERRUPTED
            h.released_at.append(t)
            self._log(t, cl)
        if not self.cfg.rerun or not (held or remaining):
            return
        queue = held + remaining
        for q, h in enumerate(queue):
            h.qidx = q
            h.state = PENDING
        new = Ctrl(len(self.ctrls), ctrl.name + "'", queue, ctrl.forks, t + self.cfg.start_s)
        for h in queue:
            h.ctrl = new.cid
        self._preflight(new, 0)
        self.ctrls.append(new)

    # ---- what it reports ------------------------------------------------------------------------
    def _renewals(self, wall: float) -> None:
        """The window's Lease (one per cluster) and each controller's participant Lease, renewed
        every TTL/3 (GET + PUT), booked once the window's length is known."""
        co, cfg = self.costs, self.cfg
        for cl in self.clusters:
            period = cfg.window_lease_ttl / 3.0
            t = 0.0
            while t < wall:
                self.api(cl.cid, t, 2, 2 * co.slot_lease_bytes, "window_lease_renew")
                t += period
        for ctrl in self.ctrls:
            period = cfg.participant_ttl / 3.0
            t, stop = ctrl.t0 - cfg.start_s, ctrl.end if ctrl.end is not None else wall
            while t < stop:
                self.api(0, t, 2, 2 * co.slot_lease_bytes, "participant_lease_renew")
                t += period

    def _bound(self, wall: float, lanes_end: float) -> tuple[str, dict[str, float]]:
        """What the wall time is bound by: "limits" (the hosts' own time over each cluster's width is
        >= 85% of the wall), "controllers (CPU)" (one controller's main process, same test), else the
        largest idle slot time of the cluster that admitted last: "controllers (lanes)" (free slots no
        lane asks for: slices run dry, too few forks), "admission" (free slots lanes ask for: polls,
        decisions, lost slot Lease races), "tail" (after its last admission); "stopped (failures)"."""
        cfg = self.cfg
        lane_start = min(c.lanes_at for c in self.initial)
        intrinsic: dict[int, float] = {}
        per_ctrl: dict[int, float] = {}
        for h in self.hosts:
            if h.state in (DONE, FAILED):
                x = self.lane_ml + (self.nonml + h.work) * (h.fail_frac if h.fail else 1.0)
                intrinsic[h.cluster] = intrinsic.get(h.cluster, 0.0) + x
                per_ctrl[h.ctrl] = per_ctrl.get(h.ctrl, 0.0) + x
        limits = max(lane_start + intrinsic.get(cl.cid, 0.0) / cl.width for cl in self.clusters) + cfg.end_s
        cpu = max(c.t0 + c.ml_busy for c in self.initial) + cfg.end_s
        lanes = max(c.lanes_at + per_ctrl.get(c.cid, 0.0) / c.forks for c in self.initial) + cfg.end_s
        ctrls = max(cpu, lanes)
        bounds = {
            "limits_s": round(limits, 1),
            "controllers_cpu_s": round(cpu, 1),
            "controllers_lanes_s": round(lanes, 1),
        }
        # idle slot-seconds of the cluster that ended last: before its last admission, asked for by
        # some lane (admission) or by none (controllers: no lane free to ask), and after it (the tail)
        last = max(self.clusters, key=lambda c: c.last_admit_t)
        area, contended, starved = last.at_last_admit
        tail = last.width * max(0.0, lanes_end - last.last_admit_t) - (last.area - area)
        idle = {"controllers (lanes)": starved, "admission": contended, "tail": tail}
        bounds.update({"idle_slot_s_%s" % k.split()[0]: round(v, 1) for k, v in idle.items()})
        if self.stopped_at is not None:
            return "stopped (failures)", bounds
        top = max(limits, ctrls)
        if top >= 0.85 * wall:
            if limits >= ctrls:
                return "limits", bounds
            return ("controllers (CPU)" if cpu >= lanes else "controllers (lanes)"), bounds
        return max(idle, key=lambda k: idle[k]), bounds

    def result(self) -> Result:
        cfg = self.cfg
        ends = [c.end if c.end is not None else c.lanes_at for c in self.ctrls]
        ends += [h.ended_at for h in self.hosts if h.ended_at is not None]
        lanes_end = max(ends)
        wall = lanes_end + cfg.end_s
        self._renewals(wall)
        for cl in self.clusters:
            cl.advance(lanes_end)
        counts = {name: 0 for name in STATE_NAMES}
        for h in self.hosts:
            counts[STATE_NAMES[h.state]] += 1
        never = sum(1 for h in self.hosts if h.state == PENDING and h.attempts == 0)
        bound, bounds = self._bound(wall, lanes_end)
        busiest = max(self.clusters, key=lambda c: c.requests)
        summary: dict[str, Any] = {
            "nodes": cfg.nodes,
            "clusters": len(self.clusters),
            "controllers": cfg.controllers,
            "forks_per_controller": self.forks,
            "max_parallel_upgrades": cfg.max_parallel,
            "max_unavailable": cfg.max_unavailable,
            "limits_per_cluster": [
                {"maxParallelUpgrades": c.max_parallel, "maxUnavailable": c.max_unavailable} for c in self.clusters
            ],
            "seed": cfg.seed,
            "wall_s": round(wall, 1),
            "wall_h": round(wall / 3600.0, 3),
            "upgraded": counts["done"],
            "hosts_per_hour": round(counts["done"] / (wall / 3600.0), 1) if wall > 0 else 0.0,
            "bound_by": bound,
            "bounds": bounds,
            "peak_in_flight": [c.peak_in_flight for c in self.clusters],
            "peak_unavailable": [c.peak_unavailable for c in self.clusters],
            "failures": counts["failed"] + counts["stalled"],
            "not_admitted_failed": counts["stalled"],
            "stopped_at_s": None if self.stopped_at is None else round(self.stopped_at, 1),
            "interrupted": counts["interrupted"] + counts["held"],
            "never_started": never,
            "at_target": counts["at_target"],
            "preflight_s": [round(c.lanes_at - c.t0, 1) for c in self.initial],
            "main_process_busy": [round(c.ml_busy / max(1e-9, (c.end or wall) - c.t0), 3) for c in self.initial],
            "admission": {
                "decisions": sum(c.decisions for c in self.clusters),
                "waits": sum(c.waits for c in self.clusters),
                "conflicts_409": sum(c.conflicts for c in self.clusters),
            },
            "api": {
                "per_api_server": [
                    {
                        "requests": c.requests,
                        "mean_rps": round(c.requests / wall, 2),
                        "peak_rps": round(max(c.buckets.values(), default=0) / BUCKET_S, 1),
                        "mbytes": round(c.bytes / 1e6, 1),
                    }
                    for c in self.clusters
                ],
                "busiest": busiest.cid,
                "by_kind": dict(sorted(self.kinds.items())),
                "peak_bucket_s": BUCKET_S,
            },
        }
        if self.kill:
            summary["controller_lost"] = self.kill
        return Result(summary, self.hosts, self.trace)


def simulate(cfg: Config) -> Result:
    return Sim(cfg).run()


# ---- the grid and its report ----------------------------------------------------------------------
DEFAULT_NODES = (1000, 10000, 20000)
DEFAULT_CONTROLLERS = (1, 2, 4, 8)
QUICK_NODES = (200, 1000)
QUICK_CONTROLLERS = (1, 2)


def _row(s: dict[str, Any]) -> str:
    limits = s["limits_per_cluster"][0]
    api = s["api"]["per_api_server"][s["api"]["busiest"]]
    return "| %s | %d | %d / %d | %d | %d | %.2f | %s | %s | %d | %d | %.1f / %.1f | %s | %d | %d |" % (
        "{:,}".format(s["nodes"]),
        s["clusters"],
        limits["maxParallelUpgrades"],
        limits["maxUnavailable"],
        s["controllers"],
        s["forks_per_controller"],
        s["wall_h"],
        "{:,}".format(round(s["hosts_per_hour"])),
        s["bound_by"],
        max(s["peak_in_flight"]),
        max(s["peak_unavailable"]),
        api["mean_rps"],
        api["peak_rps"],
        "{:,}".format(round(api["mbytes"])),
        s["failures"],
        s["never_started"],
    )


TABLE_HEAD = (
    "| nodes | clusters | maxParallelUpgrades / maxUnavailable (per cluster) | S | forks per controller | wall h "
    "| hosts/h | bound by | peak in flight | peak unavailable | API req/s mean / peak | API MB | failures "
    "| never started |\n|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
)


def table(rows: list[dict[str, Any]]) -> str:
    return "\n".join([TABLE_HEAD] + [_row(s) for s in rows])


def markdown(rows: list[dict[str, Any]], base: Config, argv: list[str]) -> str:
    co, w = base.costs, base.work
    lost = [s for s in rows if "controller_lost" in s]
    lines = [
        "# Maintenance window at fleet size: a model, not a measurement",
        "",
        "`python bench/window_sim.py %s` (seed %d). Per cluster (one per %s nodes, its own API server and "
        "limits); peaks are the largest cluster's; API columns are the busiest API server's (peak over %d s)."
        % (" ".join(argv), base.seed, f"{base.cluster_size:,}", BUCKET_S),
        "",
        table(rows),
        "",
        "Inputs measured on the lab (%s): %.1f task executions per upgraded host, %.0f per host at the target, "
        "%.1f s Ansible overhead per lane, one controller's main process %s hosts/h (%.1f ms a task execution); "
        "Table %.0f B/node, Node %.0f B, slot Lease %.0f B; a decision %s s warm/cold at %s Nodes."
        % (
            "; ".join(co.sources),
            co.execs_upgraded,
            co.execs_at_target,
            co.overhead_s,
            f"{round(co.cap_hosts_per_hour):,}",
            co.exec_s * 1000,
            co.table_bytes_per_node,
            co.node_bytes,
            co.slot_lease_bytes,
            ", ".join("%g/%g" % (p[1], p[2]) for p in co.decision_points),
            "/".join(f"{int(p[0]):,}" for p in co.decision_points),
        ),
        "",
        "Assumed: drain, install, reload lognormal medians %g/%g/%g s, %d%% reboot (median %g s), %d%% of hosts "
        "%g-%gx slower; fail rate %g, max failures %d; preflight %g task executions and %g s of worker time a host; "
        "window start %g s, end %g s; participant Lease TTL %g s; forks ceil(width/S)+1 unless given."
        % (
            w.drain[0],
            w.install[0],
            w.reload[0],
            round(w.reboot_fraction * 100),
            w.reboot[0],
            round(w.slow_fraction * 100),
            w.slow_factor[0],
            w.slow_factor[1],
            base.fail_rate,
            base.max_failures,
            co.execs_preflight,
            base.preflight_host_s,
            base.start_s,
            base.end_s,
            base.participant_ttl,
        ),
    ]
    for s in lost:
        k = s["controller_lost"]
        if "sweep_at_s" not in k:
            continue
        lines += [
            "",
            "Controller %s lost at %.2f h (%s nodes, S=%d): %d in flight kept their slots until the sweep at %.2f h "
            "(%s slot-s held, %s s of their work lost), %s not started: %s hosts delayed; %s: wall %.2f h against "
            "%.2f h without the loss."
            % (
                k["controller"],
                k["at_s"] / 3600,
                f"{s['nodes']:,}",
                s["controllers"],
                k["in_flight_at_kill"],
                k["sweep_at_s"] / 3600,
                f"{round(k['slot_s_held_by_lost_controller']):,}",
                f"{round(k['work_s_lost']):,}",
                f"{k['not_started_at_kill']:,}",
                f"{k['hosts_delayed']:,}",
                "rerun by a replacement" if k["rerun"] else "not rerun (%d never started)" % s["never_started"],
                s["wall_h"],
                k.get("wall_h_without_the_loss", float("nan")),
            ),
        ]
    return "\n".join(lines) + "\n"


def grid(base: Config, nodes: Iterable[int], controllers: Iterable[int]) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        for s in controllers:
            res = simulate(replace(base, nodes=n, controllers=s))
            row = res.summary
            if base.kill_controller_at is not None:
                ref = simulate(replace(base, nodes=n, controllers=s, kill_controller_at=None)).summary
                row["controller_lost"]["wall_h_without_the_loss"] = ref["wall_h"]
            rows.append(row)
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    about = (__doc__ or "").split("\n\n", maxsplit=1)[0]
    ap = argparse.ArgumentParser(description=about, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nodes", type=int, nargs="+", help="default %s" % (DEFAULT_NODES,))
    ap.add_argument("--controllers", type=int, nargs="+", help="S, default %s" % (DEFAULT_CONTROLLERS,))
    ap.add_argument("--max-parallel", type=int, default=50, help="maxParallelUpgrades per cluster (default 50)")
    ap.add_argument("--max-unavailable", default="10%", help="maxUnavailable per cluster (default 10%%)")
    ap.add_argument("--forks", type=int, help="lanes per controller (default ceil(width of all clusters / S) + 1)")
    ap.add_argument("--fail-rate", type=float, default=0.002, help="probability a host fails (default 0.002)")
    ap.add_argument("--max-failures", type=int, default=100, help="maintenance_max_failures (default 100)")
    ap.add_argument("--kill-controller-at", type=float, metavar="HOURS", help="controller 0 dies this long in")
    ap.add_argument("--sweep-after", type=float, metavar="S", help="seconds to the sweep (default the TTL, 120)")
    ap.add_argument("--no-rerun", action="store_true", help="the lost controller's slice is not rerun")
    ap.add_argument("--order", choices=("interleaved", "cluster"), default="interleaved")
    ap.add_argument("--cluster-size", type=int, default=10000, help="nodes per cluster (default 10000)")
    ap.add_argument("--view-lag", type=float, default=0.0, help="seconds a freed node still looks busy")
    ap.add_argument("--quick", action="store_true", help="a small grid for CI (writes window-sim-quick.*)")
    ap.add_argument("--out-dir", type=Path, default=BENCH_DIR)
    args = ap.parse_args(argv)
    costs = load_costs()
    base = Config(
        seed=args.seed,
        max_parallel=args.max_parallel,
        max_unavailable=args.max_unavailable,
        forks=args.forks,
        fail_rate=args.fail_rate,
        max_failures=args.max_failures,
        kill_controller_at=None if args.kill_controller_at is None else args.kill_controller_at * 3600.0,
        sweep_after=args.sweep_after,
        rerun=not args.no_rerun,
        order=args.order,
        cluster_size=args.cluster_size,
        view_lag=args.view_lag,
        costs=costs,
    )
    nodes = args.nodes or (QUICK_NODES if args.quick else DEFAULT_NODES)
    ctrls = args.controllers or (QUICK_CONTROLLERS if args.quick else DEFAULT_CONTROLLERS)
    t0 = time.monotonic()
    rows = grid(base, nodes, ctrls)
    took = time.monotonic() - t0
    md = markdown(rows, base, argv)
    print(md)
    for note in costs.sources:
        print("inputs: %s" % note)
    print("simulated %d windows in %.1f s" % (len(rows), took))
    stem = "window-sim-quick" if args.quick else "window-sim"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "model": "a discrete-event model, not a measurement (bench/window_sim.py docstring)",
        "argv": argv,
        "inputs": {"costs": asdict(costs), "work": asdict(base.work)},
        "config": {k: v for k, v in asdict(base).items() if k not in ("costs", "work")},
        "rows": rows,
    }
    (args.out_dir / (stem + ".json")).write_text(json.dumps(doc, indent=2) + "\n")
    (args.out_dir / (stem + ".md")).write_text(md)
    print("wrote %s and %s" % (args.out_dir / (stem + ".json"), args.out_dir / (stem + ".md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
