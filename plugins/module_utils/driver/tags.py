# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Driver image tags built from parts (never by splitting a tag: kernel versions hold hyphens).

Formats come from the vendor profile: NVIDIA precompiled ``{branch}-{kernel}-{os_tag}``
(``525-5.15.0-69-generic-ubuntu22.04``), NVIDIA regular ``{version}-{os_tag}``, Rebellions
``{version}-{kernel}-{os_tag}`` (``3.0.0-6.8.0-90-generic-ubuntu22.04``). Only the labels a format
needs are read; an override (planned driver, planned kernel) replaces the label it stands for.
"""

from __future__ import annotations

import re
import string
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import (
    FACT_LABELS,
    LabelError,
    driver_branch,
    read_driver_version,
    read_label,
    stale_label_warnings,
)
from ansible_collections.npuops.fleet.plugins.module_utils.driver.os_tags import OsTagError, os_tag
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
KNOWN_FIELDS = ("branch", "version", "kernel", "os_tag")


class TagError(ValueError, FleetError):
    """A tag cannot be built (bad part, unsupported OS, bad format); message names node and why."""


def format_fields(fmt: str) -> list[str]:
    """Field names used by a tag format (``{branch}-{kernel}-{os_tag}`` -> branch, kernel, os_tag)."""
    fields = [part[1] for part in string.Formatter().parse(fmt) if part[1] is not None]
    for name in fields:
        if name not in KNOWN_FIELDS:
            raise TagError("tag format %r uses unknown field {%s}; known: %s" % (fmt, name, ", ".join(KNOWN_FIELDS)))
    return fields


def build_tag(fmt: str, parts: Mapping[str, Optional[str]], node: str = "") -> str:
    """Fill ``fmt`` from ``parts``; every used part must be non-empty and tag-safe."""
    fields = format_fields(fmt)
    values = {}
    for name in fields:
        value = parts.get(name)
        value = "" if value is None else str(value).strip()
        if not value:
            raise TagError("node %s: tag part %s is empty" % (node or "<labels>", name))
        if not PART_RE.match(value):
            raise TagError("node %s: tag part %s=%r has characters not allowed in an image tag" % (node, name, value))
        values[name] = value
    tag = fmt.format(**values)
    if not TAG_RE.match(tag):
        raise TagError("node %s: %r is not a valid image tag (max 128 of [A-Za-z0-9_.-])" % (node, tag))
    return tag


def image_ref(repository: str, tag: str, registry: Optional[str] = None) -> str:
    """``<registry>/<path>:<tag>``. ``registry`` replaces the repository's registry host, if any."""
    repository = repository.strip().rstrip("/")
    if registry:
        first, dummy, rest = repository.partition("/")
        has_host = bool(rest) and ("." in first or ":" in first or first == "localhost")
        path = rest if has_host else repository
        repository = registry.strip().rstrip("/") + "/" + path
    return "%s:%s" % (repository, tag)


def compute_tag(
    labels: Mapping[str, Any],
    profile: Mapping[str, Any],
    node: str = "",
    node_info: Optional[Mapping[str, Any]] = None,
    driver_version: Optional[str] = None,
    branch: Optional[str] = None,
    kernel: Optional[str] = None,
    precompiled: bool = True,
    keys: Optional[Mapping[str, str]] = None,
    os_tag_rules: Optional[Mapping[str, Any]] = None,
    check_stale: bool = True,
) -> dict[str, Any]:
    """Tag of one node. Returns ``{tag, parts, label_keys, overrides, warnings, format}``.

    Raises LabelError (missing/empty label: ``.node``, ``.key``) or TagError (unsupported OS,
    bad part). ``driver_version``/``branch``/``kernel`` are the what-if overrides.
    """
    keys = dict(keys or FACT_LABELS)
    fmt = profile["tag_format"] if precompiled else (profile.get("regular_tag_format") or "{version}-{os_tag}")
    fields = format_fields(fmt)
    parts: dict[str, Any] = {}
    used: dict[str, Any] = {}
    overrides: dict[str, str] = {}

    if "branch" in fields or "version" in fields:
        if driver_version:
            parts["version"] = str(driver_version).strip()
            parts["branch"] = str(branch).strip() if branch else driver_branch(parts["version"])
            overrides["driver_version"] = parts["version"]
        elif branch and "version" not in fields:
            parts["branch"] = str(branch).strip()
            overrides["driver_branch"] = parts["branch"]
        else:
            if branch:
                raise TagError(
                    "node %s: tag format %r needs the full driver version; a branch (%s) is not enough"
                    % (node, fmt, branch)
                )
            drv = read_driver_version(labels, profile, node)
            parts["version"], parts["branch"] = drv["version"], drv["branch"]
            used["driver"] = drv["label_keys"]
    if "kernel" in fields:
        if kernel:
            parts["kernel"] = str(kernel).strip()
            overrides["kernel"] = parts["kernel"]
        else:
            parts["kernel"] = read_label(labels, keys["kernel"], node)
            used["kernel"] = keys["kernel"]
    if "os_tag" in fields:
        os_id = read_label(labels, keys["os_id"], node)
        os_ver = read_label(labels, keys["os_version_id"], node)
        used["os_id"], used["os_version_id"] = keys["os_id"], keys["os_version_id"]
        try:
            parts["os_tag"] = os_tag(os_id, os_ver, os_tag_rules)
        except OsTagError as exc:
            raise TagError("node %s: %s" % (node or "<labels>", exc)) from exc
        parts["os_id"], parts["os_version_id"] = os_id.lower(), os_ver
    tag = build_tag(fmt, parts, node)
    warnings = stale_label_warnings(node, labels, node_info, keys, os_tag_rules) if check_stale else []
    return {"tag": tag, "parts": parts, "label_keys": used, "overrides": overrides, "warnings": warnings, "format": fmt}


__all__ = ["TagError", "LabelError", "build_tag", "compute_tag", "format_fields", "image_ref"]
