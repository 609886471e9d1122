"""Which lab tests and fault cases one CI run takes, and the record of when each last ran.

`make test` cannot run every lab test inside CI's budget, so it runs one rotation of N:

- A test's **slot** is fixed by its identity: sha256 of SALT + its pytest node id (``file::name[param]``)
  modulo N. Adding, removing or renaming a test moves no other test. SALT was picked once so that the
  87 lab tests of its day split 29/28/30 with every file of 3 or more tests in each third; changing it
  would reshuffle every test, so it stays.
- A run's **rotation** is the slot attempted least recently on this machine (never first), read from
  the record; a slot counts as attempted when a session that collected all of tests/integration ran
  it to its end (not interrupted). Tests whose last outcome on the machine was a failure or an error
  run again in every run, whatever their slot, until they pass: failures repeat without stalling the
  rotation of the others. Ties go to ``counter % N`` (commits on HEAD + days since the epoch), so
  machines without a record still move on. An explicit seed (NPUOPS_IT_SEED) wins. Fault cases have
  no slots: a run takes the FAULTS_CASES cases run least recently (:func:`stalest`) plus those that
  failed last.
- The **record** (JSON, ``$NPUOPS_TEST_RECORD``, default ``$NPUOPS_LAB_CACHE/test-record.json``, i.e.
  ``~/.cache/npuops-lab/test-record.json``) keeps per test and case when it last ran, its outcome,
  when it last passed, at which commit and in which rotation; it lives beside the lab's other caches
  so that every fresh clone CI makes on the machine adds to the same one. ``render()`` writes it as
  Markdown (tests/integration/last-rotations.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

REPO = Path(__file__).resolve().parents[2]
KEEP_RUNS = 30  # run entries kept in the record
SALT = "152:"


def record_path() -> Path:
    explicit = os.environ.get("NPUOPS_TEST_RECORD")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("NPUOPS_LAB_CACHE") or os.path.expanduser("~/.cache/npuops-lab")
    return Path(cache) / "test-record.json"


def slot(ident: str, n: int) -> int:
    """The rotation slot (0..n-1) of a test or case, from its identity alone."""
    return int(hashlib.sha256((SALT + ident).encode()).hexdigest()[:12], 16) % max(n, 1)


def commit_count(repo: Path = REPO) -> int:
    """Commits on HEAD (0 when git cannot tell): the tie-break that advances with every landing."""
    r = subprocess.run(["git", "-C", str(repo), "rev-list", "--count", "HEAD"], capture_output=True, text=True,
                       check=False)
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else 0


def head(repo: Path = REPO) -> str:
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                       check=False)
    return r.stdout.strip() or "unknown"


def load(path: Optional[Path] = None) -> dict[str, Any]:
    """The record, or an empty one when missing or unreadable (never an error: it only orders runs)."""
    p = path or record_path()
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {"lab": {}, "faults": {}, "runs": [], "slots": {}}
    if not isinstance(data, dict):
        return {"lab": {}, "faults": {}, "runs": [], "slots": {}}
    for key, empty in (("lab", {}), ("faults", {}), ("runs", []), ("slots", {})):
        if not isinstance(data.get(key), type(empty)):
            data[key] = empty
    return data


def save(data: Mapping[str, Any], path: Optional[Path] = None) -> Path:
    p = path or record_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record-", dir=str(p.parent))
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, p)
    return p


def choose(n: int, occupied: Iterable[int], slot_runs: Mapping[str, Any], counter: int) -> int:
    """The rotation (0..n-1) to run: of the ``occupied`` slots (those with tests), the one attempted
    longest ago; a slot never attempted comes first. ``slot_runs`` is the record's ``slots[str(n)]``:
    slot (as a string) -> epoch seconds of its last attempt. Ties go to the slot nearest after
    ``counter % n``."""
    n = max(n, 1)
    slots = sorted(set(occupied)) or [counter % n]
    return min(slots, key=lambda s: (float(slot_runs.get(str(s)) or 0.0), (s - counter) % n))


def failing(seen: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The identities whose last outcome was a failure or an error: they run again until they pass."""
    return sorted(i for i, e in seen.items() if (e or {}).get("outcome") in ("failed", "error"))


def counter_now(repo: Path = REPO) -> int:
    """The tie-break for a machine without a record: commits on HEAD plus days since the epoch, so it
    moves with every landing and, in a shallow clone (1 commit), still every day."""
    return commit_count(repo) + int(time.time() // 86400)


def now_iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def note_result(data: dict[str, Any], kind: str, ident: str, outcome: str, ts: float, commit: str,
                rotation: str) -> None:
    """Record one lab test's (kind "lab") or fault case's (kind "faults") outcome: passed / failed
    (it ran: ``ran`` / ``ran_ts`` move), skipped / error (a skip, or a setup that failed before the test
    body: ``last`` moves, ``ran`` does not)."""
    entry = data.setdefault(kind, {}).setdefault(ident, {})
    entry.update({"last": now_iso(ts), "outcome": outcome, "commit": commit, "rotation": rotation})
    if outcome in ("passed", "failed"):
        entry.update({"ran": now_iso(ts), "ran_ts": ts})
    if outcome == "passed":
        entry.update({"passed": now_iso(ts), "passed_commit": commit})


def note_slot(data: dict[str, Any], n: int, slot_: int, ts: float) -> None:
    """Slot ``slot_`` of ``n`` was attempted at ``ts`` (a whole-suite session ran it to its end)."""
    data.setdefault("slots", {}).setdefault(str(n), {})[str(slot_)] = ts


@contextlib.contextmanager
def updating(path: Optional[Path] = None) -> Iterator[dict[str, Any]]:
    """Load, let the caller change, and save the record under an exclusive lock (``<record>.lock``),
    so two runs at once (a lab pytest and a fault sweep) lose none of each other's entries."""
    p = path or record_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(str(p) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = load(p)
            yield data
            save(data, p)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def note_run(data: dict[str, Any], run: Mapping[str, Any]) -> None:
    data.setdefault("runs", []).append(dict(run))
    data["runs"] = data["runs"][-KEEP_RUNS:]


def render(data: Mapping[str, Any], n: int) -> str:
    """The record as Markdown: the slots' last attempts, the last runs, then every lab test (those
    collected by the last lab run, ``lab_ids``, and any recorded) and fault case."""
    lab = dict(data.get("lab") or {})
    for ident in data.get("lab_ids") or []:
        lab.setdefault(ident, {})
    never = sorted(i for i, e in lab.items() if not e.get("passed"))
    slot_runs = (data.get("slots") or {}).get(str(n)) or {}
    lines = ["# When each lab test and fault case last ran",
             "",
             "Written by every `make test` / `make integration` / `tests/faults/run.py` run from the record",
             "`%s` on the machine that ran them (tests/integration/rotation.py). Slot = sha256(salt + id) %% %d;"
             % ("$NPUOPS_LAB_CACHE/test-record.json", n),
             "a run takes the slot attempted least recently, plus every test whose last outcome was a failure.",
             "",
             "Slots, last attempted: %s." % (", ".join(
                 "%d: %s" % (s, now_iso(float(slot_runs[str(s)])) if str(s) in slot_runs else "never")
                 for s in range(n))),
             "", "%d lab tests known, %d never passed on this machine%s" % (
                 len(lab), len(never), (": " + ", ".join("`%s`" % i for i in never[:20])
                                        + (" ..." if len(never) > 20 else "")) if never else "."),
             "", "## Last runs", "", "| when | what | rotation | commit | ran | passed | failed |",
             "|---|---|---|---|---|---|---|"]
    for r in reversed(list(data.get("runs") or [])[-12:]):
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r.get("when", "?"), r.get("kind", "?"), r.get("rotation", "?"), r.get("commit", "?"),
            r.get("ran", "?"), r.get("passed", "?"), r.get("failed", "?")))
    for kind, title, rows in (("lab", "Lab tests", lab),
                              ("faults", "Fault cases (the least recently run first; no slots)",
                               data.get("faults") or {})):
        lines += ["", "## %s (%d)" % (title, len(rows)), "",
                  "| id | slot | last ran | last outcome | rotation | commit | last passed |",
                  "|---|---|---|---|---|---|---|"]
        for ident in sorted(rows):
            e = rows[ident]
            lines.append("| `%s` | %s | %s | %s | %s | %s | %s |" % (
                ident, slot(ident, n) if kind == "lab" else "-", e.get("ran", "never"), e.get("outcome", "-"),
                e.get("rotation", "-"), e.get("commit", "-"), e.get("passed", "never")))
    return "\n".join(lines) + "\n"


def stalest(idents: Iterable[str], count: int, seen: Mapping[str, Mapping[str, Any]], counter: int) -> list[str]:
    """The ``count`` identities run least recently (never run first), in their given order; ties go to
    the ones nearest after position ``counter * count``, so without a record consecutive counters take
    consecutive slices. Used for the fault cases, whose few-per-run share wants no uneven slots, and
    to pick the real-package test (callers add :func:`failing` ones themselves where they repeat them)."""
    ids = list(idents)
    if count >= len(ids):
        return ids
    n = len(ids)
    pos = {ident: i for i, ident in enumerate(ids)}
    order = sorted(ids, key=lambda i: (float((seen.get(i) or {}).get("ran_ts") or 0.0),
                                       (pos[i] - counter * count) % n))
    chosen = set(order[:count])
    return [i for i in ids if i in chosen]
