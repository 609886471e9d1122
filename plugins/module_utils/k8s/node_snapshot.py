# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""A compact view of a vendor's Nodes for admission, at bytes that do not grow with whole Node objects.

Admission needs, for every node of the vendor: its name, whether it is Ready, whether it is cordoned,
and - only for nodes in an upgrade - its upgrade-state label and last-transition annotation. A full
LIST of 10,000 Nodes of ~50 KB is ~500 MB per decision; this view reads:

* a server-side **Table** LIST of the vendor's Nodes (``Accept: application/json;as=Table;v=v1;
  g=meta.k8s.io``, ``includeObject=None``): per node one row of kubectl's columns, ~150 bytes, from
  which the name and the Status column (``Ready``, ``NotReady``, ``Unknown``, ``,SchedulingDisabled``)
  are taken. It is cached in a file on the control node for :data:`MAX_AGE` seconds and shared by
  every module call of that node (the lanes of one control node);
* always fresh, whole objects of the few nodes that matter exactly: those whose upgrade-state label
  is set to a state of an upgrade (label selector ``state in (...)``) and those cordoned
  (field selector ``spec.unschedulable=true``), bounded by maxUnavailable plus the cordons of others.

So only "not Ready for a reason of its own" can be up to MAX_AGE seconds old. That is safe for the
same reason the API's own Ready condition is: the node lifecycle controller itself only marks a node
NotReady after node-monitor-grace-period (40-50 s) without a heartbeat, and this run's own admissions
stay exact through the slot Lease's compare-and-swap and the fresh lists.

``nodes()`` returns minimal Node dicts (metadata.name/labels/annotations, spec.unschedulable,
status.conditions[Ready]) that :func:`admission.verdict` reads like whole ones. Without an API client
that can send the Table request (the unit tests' fakes), or when the server refuses it, it falls back
to the full LIST. ``bytes`` counts the response bytes read, for the benchmark.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"
# seconds a cached Table of the vendor's nodes is used before it is read again
MAX_AGE = 15.0
PAGE = 5000
# seconds one Table page may take (connect, read); k8s_retry retries a timeout as transient
REQUEST_TIMEOUT = (10, 60)


def parse_table(table: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    """name -> {ready, unschedulable} from a meta.k8s.io Table of Nodes (kubectl's columns).
    Raises ValueError when the table has no Name or Status column."""
    cols = [str(c.get("name", "")).lower() for c in table.get("columnDefinitions") or []]
    if "name" not in cols or "status" not in cols:
        raise ValueError("Node table without Name/Status columns: %s" % cols)
    i_name, i_status = cols.index("name"), cols.index("status")
    out: dict[str, dict[str, bool]] = {}
    for row in table.get("rows") or []:
        cells = row.get("cells") or []
        words = [w.strip() for w in str(cells[i_status]).split(",")]
        out[str(cells[i_name])] = {"ready": "Ready" in words, "unschedulable": "SchedulingDisabled" in words}
    return out


def minimal_node(name: str, ready: bool, unschedulable: bool, presence_label: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {presence_label: "true"}, "annotations": {}},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _file_digest(path: Optional[str]) -> str:
    """sha256 of a small file's content ("" when there is none or it cannot be read)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read(1 << 20)).hexdigest()
    except OSError:
        return ""


class NodeSnapshot:
    """The vendor's nodes as admission needs them (see the module docstring)."""

    def __init__(
        self,
        core: Any,
        profile: Mapping[str, Any],
        states: tuple[str, ...],
        cache_dir: Optional[str] = None,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.presence = profile["presence_label"]
        self.selector = "%s=true" % self.presence
        self.busy_selector = "%s,%s in (%s)" % (self.selector, profile["upgrade_state_label"], ",".join(states))
        self.api: Any = getattr(core, "api_client", None)
        self.max_age = max_age
        self.clock = clock
        self.bytes = 0
        self.table_reads = 0
        # whether the last nodes() took the readiness from the file cache (older than this call)
        self.from_cache = False
        self.cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "npuops-fleet-%d" % os.getuid())

    # ---- the Table, cached -----------------------------------------------------------------------
    def _cache_path(self) -> str:
        conf = getattr(self.api, "configuration", None)
        # one cluster per key: two clusters behind the same address (tunnels, port forwards) differ
        # by their CA. By its content: the client writes an embedded CA to a new temp file per process.
        who = [str(getattr(conf, "host", "") or ""), _file_digest(getattr(conf, "ssl_ca_cert", None))]
        key = hashlib.sha256("\n".join(who + [self.selector]).encode()).hexdigest()[:16]
        return os.path.join(self.cache_dir, "nodes-%s.json" % key)

    def _cached(self) -> Optional[dict[str, dict[str, bool]]]:
        if self.max_age <= 0 or not self._cache_dir_ours():
            return None
        try:
            fd = os.open(self._cache_path(), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, encoding="utf-8") as fh:
                data = json.load(fh)
            rows = data["rows"]
            if 0 <= self.clock() - float(data["at"]) <= self.max_age and isinstance(rows, dict):
                return rows
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def _cache_dir_ours(self) -> bool:
        """The cache directory is this user's and nobody else's (it sits in a shared temp dir)."""
        try:
            st = os.lstat(self.cache_dir)  # a symlink planted there is not ours
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077

    def _store(self, rows: dict[str, dict[str, bool]]) -> None:
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            if not self._cache_dir_ours():
                return
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".nodes-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"at": self.clock(), "rows": rows}, fh)
            os.replace(tmp, self._cache_path())
        except OSError:
            pass  # no cache: the next call reads the Table again

    def _read_table(self) -> dict[str, dict[str, bool]]:
        rows: dict[str, dict[str, bool]] = {}
        token = None
        while True:
            query = [("labelSelector", self.selector), ("includeObject", "None"), ("limit", PAGE)]
            if token:
                query.append(("continue", token))
            raw = k8s_retry.call(self._get_table, query)
            self.bytes += len(raw)
            table = json.loads(raw)
            if table.get("kind") != "Table":
                raise ValueError("the server answered %s, not a Table" % table.get("kind"))
            rows.update(parse_table(table))
            token = (table.get("metadata") or {}).get("continue")
            if not token:
                break
        self.table_reads += 1
        return rows

    def _get_table(self, query: list[tuple[str, Any]]) -> bytes:
        """GET /api/v1/nodes as a Table: the generated list_node has no includeObject."""
        headers = {"Accept": TABLE_ACCEPT}
        if hasattr(self.api, "param_serialize"):  # kubernetes >= 35 (the pydantic generator)
            from kubernetes.client.exceptions import ApiException

            params = self.api.param_serialize(
                method="GET",
                resource_path="/api/v1/nodes",
                query_params=query,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            resp = self.api.call_api(*params, _request_timeout=REQUEST_TIMEOUT)
            resp.read()
            if not 200 <= resp.status <= 299:
                raise ApiException(http_resp=resp, body=resp.data.decode("utf-8", "replace"))
            return resp.data
        resp = self.api.call_api(
            "/api/v1/nodes",
            "GET",
            query_params=query,
            header_params=headers,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return resp.data

    # ---- whole objects of the nodes that must be exact --------------------------------------------
    def _list(self, **kwargs: Any) -> list[dict[str, Any]]:
        resp = k8s_retry.call(self.core.list_node, _preload_content=False, **kwargs)
        self.bytes += len(resp.data)
        return json.loads(resp.data).get("items") or []

    def full(self) -> list[dict[str, Any]]:
        """Every Node of the vendor, whole (the fallback)."""
        return k8s_wait.list_raw(self.core.list_node, label_selector=self.selector).get("items") or []

    def nodes(self) -> list[dict[str, Any]]:
        if self.api is None or not hasattr(self.api, "call_api"):
            return self.full()
        rows = self._cached()
        self.from_cache = rows is not None
        if rows is None:
            try:
                rows = self._read_table()
            except Exception as exc:  # noqa: BLE001 - a server without Table output: the full LIST
                if getattr(exc, "status", None) not in (None, 406, 415) and not isinstance(exc, ValueError):
                    raise
                return self.full()
            self._store(rows)
        exact = {n["metadata"]["name"]: n for n in self._list(label_selector=self.busy_selector)}
        cordoned = {
            n["metadata"]["name"]: n
            for n in self._list(label_selector=self.selector, field_selector="spec.unschedulable=true")
        }
        out = []
        for name in sorted(set(rows) | set(exact) | set(cordoned)):
            whole = exact.get(name) or cordoned.get(name)
            if whole is not None:
                out.append(whole)
            else:
                # not cordoned now (the fresh list says so); Ready as of the Table
                out.append(minimal_node(name, bool(rows[name]["ready"]), False, self.presence))
        return out
