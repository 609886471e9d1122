# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Support matrix (driver builds that exist) and the per-node audit against it.

CSV header: ``driver_branch,kernel,os_tag`` (extra columns allowed, any order). The driver column
may instead be ``driver_version``: for a vendor whose tag uses the full version (Rebellions) that
is the natural name; for a branch-tagged vendor (NVIDIA precompiled) a full version is reduced to
its branch (``550.90.07`` -> ``550``). Blank lines and lines starting with ``#`` are skipped, cells
are stripped, exact duplicates are counted and reported (not an error). Anything else malformed
raises :class:`MatrixError` with ``<source>:<line>: <what is wrong>``.

Entries are compared as parts ``(driver, kernel, os_tag)``, never by splitting a tag.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import LabelError, driver_branch
from ansible_collections.npuops.fleet.plugins.module_utils.driver.tags import PART_RE, TagError, compute_tag
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

DRIVER_COLUMNS = ("driver_branch", "driver_version")
REQUIRED_COLUMNS = ("kernel", "os_tag")
STATUSES = ("OK", "MISSING", "UNLABELED", "SKIPPED")


class MatrixError(ValueError, FleetError):
    """Malformed matrix; the message starts with ``<source>:<line>:`` where a line is known."""


class Matrix:
    """A set of ``(driver, kernel, os_tag)`` entries; ``driver`` is what the tag format's driver part holds."""

    def __init__(self, uses_branch: bool = True):
        self.uses_branch = uses_branch
        self.entries: set[tuple[str, str, str]] = set()
        self.duplicates: list[str] = []
        self.rows = 0

    def add(self, driver: str, kernel: str, os_tag_: str, where: str = "") -> None:
        driver = driver_branch(driver) if self.uses_branch else driver
        key = (driver, kernel, os_tag_)
        self.rows += 1
        if key in self.entries:
            self.duplicates.append("%s: duplicate entry %s" % (where or "inline", ",".join(key)))
            return
        self.entries.add(key)

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)


def _check_cell(value: str, column: str, where: str) -> str:
    value = value.strip()
    if not value:
        raise MatrixError("%s: column %s is empty" % (where, column))
    if not PART_RE.match(value):
        raise MatrixError("%s: column %s=%r has characters not allowed in an image tag" % (where, column, value))
    return value


def parse_csv(text: str, source: str = "<matrix>", uses_branch: bool = True) -> Matrix:
    """Parse matrix CSV text; MatrixError names ``source:line`` and the problem."""
    matrix = Matrix(uses_branch)
    header: Optional[list[str]] = None
    idx: dict[str, int] = {}
    driver_col = ""
    reader = csv.reader(io.StringIO(text))
    for row in reader:
        line = reader.line_num
        where = "%s:%d" % (source, line)
        if not row or all(not c.strip() for c in row) or row[0].strip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        if header is None:
            header = [c.lower() for c in cells]
            if header[0].startswith("\ufeff"):
                header[0] = header[0][1:]
            dup = {c for c in header if header.count(c) > 1}
            if dup:
                raise MatrixError("%s: header repeats column(s) %s" % (where, ", ".join(sorted(dup))))
            drivers = [c for c in DRIVER_COLUMNS if c in header]
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if not drivers:
                missing.insert(0, "driver_branch (or driver_version)")
            if missing:
                raise MatrixError(
                    "%s: header %r lacks column(s) %s; expected driver_branch,kernel,os_tag"
                    % (where, ",".join(cells), ", ".join(missing))
                )
            if len(drivers) > 1:
                raise MatrixError("%s: header has both driver_branch and driver_version; use one" % where)
            driver_col = drivers[0]
            idx = {c: header.index(c) for c in (driver_col, *REQUIRED_COLUMNS)}
            continue
        if len(cells) != len(header):
            raise MatrixError(
                "%s: expected %d columns (%s), got %d" % (where, len(header), ",".join(header), len(cells))
            )
        driver = _check_cell(cells[idx[driver_col]], driver_col, where)
        kernel = _check_cell(cells[idx["kernel"]], "kernel", where)
        tag = _check_cell(cells[idx["os_tag"]], "os_tag", where)
        if driver_col == "driver_branch" and not re.match(r"^\d+$", driver) and uses_branch:
            raise MatrixError("%s: driver_branch %r is not a branch number (e.g. 550)" % (where, driver))
        matrix.add(driver, kernel, tag, where)
    if header is None:
        raise MatrixError("%s: empty matrix (no header line driver_branch,kernel,os_tag)" % source)
    if not matrix.rows:
        # Every node would be MISSING: almost certainly the wrong file, not a fleet without builds.
        raise MatrixError("%s: empty matrix (a header but no rows)" % source)
    return matrix


def load_file(path: str, uses_branch: bool = True) -> Matrix:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    except OSError as exc:
        raise MatrixError("cannot read matrix file %s: %s" % (path, exc.strerror or exc)) from exc
    except UnicodeDecodeError as exc:
        raise MatrixError("%s: not UTF-8 text (%s)" % (path, exc)) from exc
    return parse_csv(text, path, uses_branch)


def from_list(items: Iterable[Any], uses_branch: bool = True) -> Matrix:
    """Inline matrix: dicts with driver_branch|driver_version, kernel, os_tag (extra keys allowed)."""
    matrix = Matrix(uses_branch)
    for i, item in enumerate(items or [], 1):
        where = "matrix[%d]" % i
        if not isinstance(item, Mapping):
            raise MatrixError("%s: expected a dict with driver_branch, kernel, os_tag; got %r" % (where, item))
        drivers = [c for c in DRIVER_COLUMNS if c in item]
        if len(drivers) != 1:
            raise MatrixError(
                "%s: needs exactly one of driver_branch, driver_version; got keys %s" % (where, sorted(item))
            )
        missing = [c for c in REQUIRED_COLUMNS if c not in item]
        if missing:
            raise MatrixError("%s: missing key(s) %s" % (where, ", ".join(missing)))
        driver = _check_cell(str(item[drivers[0]]), drivers[0], where)
        matrix.add(driver, _check_cell(str(item["kernel"]), "kernel", where),
                   _check_cell(str(item["os_tag"]), "os_tag", where), where)
    if not matrix.rows:
        raise MatrixError("matrix: empty inline matrix (no rows)")
    return matrix


def _driver_part(profile: Mapping[str, Any], parts: Mapping[str, Any]) -> str:
    return parts["branch"] if profile.get("tag_uses_branch", True) else parts["version"]


def audit_node(
    node: Mapping[str, Any],
    profile: Mapping[str, Any],
    matrix: Matrix,
    planned_kernel: Optional[str] = None,
    planned_driver: Optional[str] = None,
    keys: Optional[Mapping[str, str]] = None,
    os_tag_rules: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Audit one node (raw API dict: metadata.labels, status.nodeInfo). Never raises for label problems."""
    meta = node.get("metadata") or {}
    name = meta.get("name") or ""
    labels = meta.get("labels") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    result: dict[str, Any] = {"name": name, "status": "", "tag": None}
    skip = profile.get("upgrade_skip_label")
    if skip and str(labels.get(skip, "")).strip().lower() == "true":
        result.update(status="SKIPPED", reason="%s=true" % skip)
        return result
    try:
        info_ = compute_tag(
            labels, profile, name, info, driver_version=planned_driver, kernel=planned_kernel,
            keys=keys, os_tag_rules=os_tag_rules,
        )
    except LabelError as exc:
        result.update(status="UNLABELED", missing_label=exc.key, reason=str(exc))
        return result
    except TagError as exc:
        result.update(status="UNLABELED", missing_label=None, reason=str(exc))
        return result
    parts = info_["parts"]
    key = (_driver_part(profile, parts), parts["kernel"], parts["os_tag"])
    result.update(
        status="OK" if key in matrix else "MISSING",
        tag=info_["tag"],
        driver=key[0],
        kernel=parts["kernel"],
        os_tag=parts["os_tag"],
    )
    if info_["overrides"]:
        result["planned"] = info_["overrides"]
    if info_["warnings"]:
        result["warnings"] = info_["warnings"]
    return result


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {s: 0 for s in STATUSES}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    missing = [r for r in results if r["status"] == "MISSING"]
    lines = ["%s MISSING %s" % (r["name"], r["tag"]) for r in missing]
    return {
        "counts": counts,
        "missing_text": "\n".join(lines) if lines else "OK",
        "missing_lines": lines or ["OK"],
        "unlabeled": [
            {"name": r["name"], "missing_label": r.get("missing_label"), "reason": r.get("reason")}
            for r in results if r["status"] == "UNLABELED"
        ],
    }
