# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""OS tags of driver images (``ubuntu22.04``, ``rhel9.4``, ``rhcos4.15``, ``sles15.5`` ...).

The GPU Operator joins the NFD labels ``system-os_release.ID`` and ``.VERSION_ID``
(``ubuntu`` + ``22.04`` -> ``ubuntu22.04``); the Rebellions NPU operator uses the same scheme.
Per distribution the version part is normalised the way the published images are named:

* ``ubuntu``: ``MAJOR.MINOR`` (``22.04``) - a point release (``22.04.4``) is reduced to it.
* ``rhel``: ``MAJOR.MINOR`` (``9.4``, ``8.10``) - images are per minor release.
* ``rhcos``: the OpenShift release (``4.15``); RHCOS puts it into VERSION_ID as
  ``415.92.202402201450-0`` (OCP 4.15 on RHEL 9.2), which is read as ``4.15``.
* ``sles`` / ``sl-micro``: ``MAJOR.SP`` (``15.5``, ``6.0``).
* ``centos``: ``MAJOR`` (``centos7``, ``centos8``).
* ``debian``: ``MAJOR`` (``debian12``).

Any other ID is an explicit error: a guessed tag would point at an image that does not exist.
Rules are data (``OS_TAG_RULES``); callers may pass extra or replacement rules.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

# id -> {pattern: regex on VERSION_ID with named groups, format: tag template, names: osImage words}
OS_TAG_RULES: dict[str, dict[str, Any]] = {
    "ubuntu": {
        "pattern": r"^(?P<major>\d{2})\.(?P<minor>\d{2})(?:\.\d+)?$",
        "format": "ubuntu{major}.{minor}",
        "names": ["ubuntu"],
    },
    "rhel": {
        "pattern": r"^(?P<major>\d+)\.(?P<minor>\d+)$",
        "format": "rhel{major}.{minor}",
        "names": ["red hat enterprise linux"],
    },
    "rhcos": {
        # 415.92.202402201450-0 (OCP 4.15) or an already short 4.15
        "pattern": r"^(?:(?P<ocp_major>4)(?P<ocp_minor>\d{1,2})\.\d+\.\d+(?:-\d+)?|(?P<major>4)\.(?P<minor>\d{1,2}))$",
        "format": "rhcos{major}.{minor}",
        "names": ["coreos"],
    },
    "sles": {
        "pattern": r"^(?P<major>\d+)\.(?P<minor>\d+)$",
        "format": "sles{major}.{minor}",
        "names": ["suse linux enterprise"],
    },
    "sl-micro": {
        "pattern": r"^(?P<major>\d+)\.(?P<minor>\d+)$",
        "format": "sl-micro{major}.{minor}",
        "names": ["suse linux micro", "sl micro"],
    },
    "centos": {
        "pattern": r"^(?P<major>\d+)(?:\.\d+)*$",
        "format": "centos{major}",
        "names": ["centos"],
    },
    "debian": {
        "pattern": r"^(?P<major>\d+)$",
        "format": "debian{major}",
        "names": ["debian"],
    },
}


class OsTagError(ValueError):
    """The OS is not supported or its VERSION_ID does not have the expected shape."""


def _rules(extra: Optional[Mapping[str, Mapping[str, Any]]]) -> dict[str, Mapping[str, Any]]:
    rules: dict[str, Mapping[str, Any]] = dict(OS_TAG_RULES)
    for os_id, rule in (extra or {}).items():
        if not isinstance(rule, Mapping) or "format" not in rule:
            raise OsTagError("os tag rule %r must be a mapping with at least 'format'" % os_id)
        rules[os_id] = rule
    return rules


def os_tag(os_id: str, version_id: str, extra_rules: Optional[Mapping[str, Mapping[str, Any]]] = None) -> str:
    """Return the image OS tag for an os-release ``ID`` and ``VERSION_ID``.

    Raises OsTagError for an unknown ID (naming the supported ones) or a VERSION_ID that does not
    match the distribution's rule. Both inputs must be non-empty (callers report missing labels).
    """
    os_id = (os_id or "").strip().lower()
    version_id = (version_id or "").strip()
    if not os_id or not version_id:
        raise OsTagError("empty OS ID or VERSION_ID (ID=%r, VERSION_ID=%r)" % (os_id, version_id))
    rules = _rules(extra_rules)
    rule = rules.get(os_id)
    if rule is None:
        raise OsTagError(
            "unsupported OS %r (VERSION_ID %r): no driver image OS tag rule; supported: %s "
            "(add one with os_tag_rules)" % (os_id, version_id, ", ".join(sorted(rules)))
        )
    pattern = rule.get("pattern")
    if not pattern:
        return rule["format"].format(version=version_id, id=os_id)
    m = re.match(pattern, version_id)
    if not m:
        raise OsTagError(
            "VERSION_ID %r of OS %r does not have the expected form (%s)" % (version_id, os_id, pattern)
        )
    parts = {k: v for k, v in m.groupdict().items() if v is not None}
    # rhcos long form: 415.92.x -> major 4, minor 15
    if "ocp_major" in parts:
        parts["major"], parts["minor"] = parts.pop("ocp_major"), parts.pop("ocp_minor")
    parts.setdefault("version", version_id)
    parts.setdefault("id", os_id)
    return rule["format"].format(**parts)


def os_image_matches(
    os_id: str, version_id: str, os_image: str, extra_rules: Optional[Mapping[str, Mapping[str, Any]]] = None
) -> Optional[bool]:
    """Whether ``node.status.nodeInfo.osImage`` (``Ubuntu 22.04.4 LTS``) agrees with the labels.

    Returns None when it cannot be judged (unknown ID, empty osImage), else True/False. Checks the
    distribution name and that the version appears (``15.5`` also matches ``15 SP5``).
    """
    if not os_image or not os_id or not version_id:
        return None
    rule = _rules(extra_rules).get(os_id.strip().lower())
    if rule is None or not rule.get("names"):
        return None
    img = os_image.lower()
    if not any(name in img for name in rule["names"]):
        return False
    version = version_id.strip()
    candidates = {version}
    m = re.match(r"^(\d+)\.(\d+)$", version)
    if m:
        candidates.add("%s sp%s" % (m.group(1), m.group(2)))
        if m.group(2) == "0":
            candidates.add(m.group(1))
    return any(re.search(r"(?<![\d.])%s(?![\d])" % re.escape(c), img) for c in candidates)
