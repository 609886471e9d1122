"""Which lab tests and fault cases one CI run takes, and the record of when each last ran.

`make test` cannot run every lab test inside CI's budget, so it runs one rotation of N:

- A test's **slot** is fixed by its identity: sha256 of SALT + its pytest node id (``file::name[param]``)
  modulo N. Adding, removing or renaming a test moves no other test. SALT was picked once so that the
  87 lab tests of its day split 29/28/30 with every file of 3 or more tests in each third; changing it
  would reshuffle every test, so it stays.
- A run's **rotation** is the slot whose members have gone longest without a run, read from the record
  on this machine (a member never seen counts as never run); ties go to ``counter % N``, the number
  of commits on HEAD, so on a machine without a record consecutive landings still differ. An explicit
  seed (NPUOPS_IT_SEED / FAULTS_SEED) wins over both.
- The **record** (JSON, ``$NPUOPS_TEST_RECORD``, default ``$NPUOPS_LAB_CACHE/test-record.json``, i.e.
  ``~/.cache/npuops-lab/test-record.json``) keeps per test and case when it last ran, its outcome,
  when it last passed, at which commit and in which rotation; it lives beside the lab's other caches
  so that every fresh clone CI makes on the machine adds to the same one. ``render()`` writes it as
  Markdown (tests/integration/last-rotations.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

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
        return {"lab": {}, "faults": {}, "runs": []}
    if not isinstance(data, dict):
        return {"lab": {}, "faults": {}, "runs": []}
    for key, empty in (("lab", {}), ("faults", {}), ("runs", [])):
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


def choose(idents: Iterable[str], n: int, seen: Mapping[str, Mapping[str, Any]], counter: int) -> int:
    """The rotation (0..n-1) to run: the slot whose least recently run member ran longest ago.

    ``seen`` maps identity -> {"ran_ts": epoch seconds, ...} (the record's "lab" or "faults"); an
    identity missing there never ran. Empty slots are never chosen while another slot has members.
    Ties go to the slot nearest after ``counter % n``."""
    n = max(n, 1)
    stalest: dict[int, float] = {}
    for ident in idents:
        s = slot(ident, n)
        ts = float((seen.get(ident) or {}).get("ran_ts") or 0.0)
        stalest[s] = min(stalest.get(s, ts), ts)
    if not stalest:
        return counter % n
    return min(stalest, key=lambda s: (stalest[s], (s - counter) % n))


def now_iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def note_result(data: dict[str, Any], kind: str, ident: str, outcome: str, ts: float, commit: str,
                rotation: str) -> None:
    """Record one test's (kind "lab") or fault case's (kind "faults") outcome: passed / failed."""
    entry = data.setdefault(kind, {}).setdefault(ident, {})
    entry.update({"ran": now_iso(ts), "ran_ts": ts, "outcome": outcome, "commit": commit, "rotation": rotation})
    if outcome == "passed":
        entry.update({"passed": now_iso(ts), "passed_commit": commit})


def note_run(data: dict[str, Any], run: Mapping[str, Any]) -> None:
    data.setdefault("runs", []).append(dict(run))
    data["runs"] = data["runs"][-KEEP_RUNS:]


def render(data: Mapping[str, Any], n: int) -> str:
    """The record as Markdown: the last runs, then every lab test and fault case with its slot."""
    lines = ["# When each lab test and fault case last ran",
             "",
             "Written by every `make test` / `make integration` / `tests/faults/run.py` run from the record",
             "`%s` on the machine that ran them (tests/integration/rotation.py). Slot = sha256(salt + id) %% %d."
             % ("$NPUOPS_LAB_CACHE/test-record.json", n),
             "", "## Last runs", "", "| when | what | rotation | commit | ran | passed | failed |",
             "|---|---|---|---|---|---|---|"]
    for r in reversed(list(data.get("runs") or [])[-12:]):
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r.get("when", "?"), r.get("kind", "?"), r.get("rotation", "?"), r.get("commit", "?"),
            r.get("ran", "?"), r.get("passed", "?"), r.get("failed", "?")))
    for kind, title in (("lab", "Lab tests"), ("faults", "Fault cases (the least recently run first; no slots)")):
        rows = data.get(kind) or {}
        lines += ["", "## %s (%d)" % (title, len(rows)), "",
                  "| id | slot | last ran | outcome | rotation | commit | last passed |",
                  "|---|---|---|---|---|---|---|"]
        for ident in sorted(rows):
            e = rows[ident]
            lines.append("| `%s` | %s | %s | %s | %s | %s | %s |" % (
                ident, slot(ident, n) if kind == "lab" else "-", e.get("ran", "-"), e.get("outcome", "-"),
                e.get("rotation", "-"), e.get("commit", "-"), e.get("passed", "never")))
    return "\n".join(lines) + "\n"


def stalest(idents: Iterable[str], count: int, seen: Mapping[str, Mapping[str, Any]], counter: int) -> list[str]:
    """The ``count`` identities run least recently (never run first), in their given order; ties go to
    the ones nearest after position ``counter``, so without a record consecutive counters take
    consecutive slices. Used for the fault cases, whose few-per-run share wants no uneven slots."""
    ids = list(idents)
    if count >= len(ids):
        return ids
    n = len(ids)
    pos = {ident: i for i, ident in enumerate(ids)}
    order = sorted(ids, key=lambda i: (float((seen.get(i) or {}).get("ran_ts") or 0.0), (pos[i] - counter * count) % n))
    chosen = set(order[:count])
    return [i for i in ids if i in chosen]
