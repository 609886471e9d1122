# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""OS tags of driver images (``ubuntu22.04``, ``rhel9``, ``rocky9``, ``rhcos4.15``, ``sles15.6`` ...).

The rules give exactly the tag the NVIDIA GPU Operator computes for a node, so that a precompiled
tag ``<driver branch>-<kernel version>-<os tag>`` (``550-5.15.0-119-generic-ubuntu22.04``) and a
regular tag ``<driver version>-<os tag>`` name the image the operator will pull. Upstream sources
(github.com/NVIDIA/gpu-operator):

* ``controllers/state_manager.go`` (``getGPUNodeOSInfo``, ClusterPolicy) and
  ``internal/state/nodepool.go`` (``getOSTag``, NVIDIADriver CR) read the NFD labels
  ``feature.node.kubernetes.io/system-os_release.ID`` and ``.VERSION_ID`` and join them; for
  ``rhel``, ``rocky`` and ``ol`` only the part of VERSION_ID before the first dot is used, for every
  other ID the whole VERSION_ID (tables of cases in ``controllers/state_manager_test.go`` and
  ``internal/state/nodepool_test.go``).
* ``api/nvidia/v1alpha1/nvidiadriver_types.go`` (``GetPrecompiledImagePath``): precompiled images are
  ``<driver>-<kernel>-<os tag>``, regular ones ``<driver>-<os tag>``.
* On OpenShift the OSTREE_VERSION label (``415.92.202402201450-0``) only picks the Driver Toolkit
  image and the node pool; the image OS tag still comes from ID and VERSION_ID (``rhcos4.15``).

Per distribution (os-release ``ID``: what VERSION_ID must look like -> tag):

* ``ubuntu``: ``YY.MM``, used whole (``22.04`` -> ``ubuntu22.04``).
* ``rhel``: ``MAJOR[.MINOR]``, major only for every release (``9.4`` -> ``rhel9``, ``8.10`` ->
  ``rhel8``, ``10.0`` -> ``rhel10``). Older operators (before v26.3) kept the minor below RHEL 10.
* ``rocky`` (Rocky Linux): ``MAJOR[.MINOR]``, major only (``9.5`` -> ``rocky9``).
* ``ol`` (Oracle Linux): ``MAJOR[.MINOR]``, major only (``9.5`` -> ``ol9``).
* ``rhcos``: the OpenShift release ``4.MINOR`` that RHCOS writes into VERSION_ID, used whole
  (``4.15`` -> ``rhcos4.15``). An OSTREE_VERSION (``415.92.2024...``) is refused: given it as
  VERSION_ID the operator would produce ``rhcos415.92...``, an image that does not exist.
* ``sles``: ``15.6`` or ``15-SP6``, used whole (``sles15.6``, ``sles15-SP6``).
* ``sl-micro``: ``MAJOR.MINOR``, used whole (``6.0`` -> ``sl-micro6.0``).
* ``centos``: ``MAJOR`` as CentOS writes it, used whole (``7`` -> ``centos7``).
* ``debian``: ``MAJOR`` as Debian writes it, used whole (``12`` -> ``debian12``).

Where upstream would join any other ID or an odd VERSION_ID blindly (``archlinuxrolling``,
``ubuntu22.04.4``), this module refuses with OsTagError instead: such a tag points at an image that
does not exist. Rules are data (``OS_TAG_RULES``); callers may pass extra or replacement rules (for
example ``talos`` with format ``talos{version}``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

# id -> {pattern: regex on VERSION_ID with named groups, format: tag template over those groups and
# {version} (the whole VERSION_ID), names: osImage words, expect: the accepted shape in words}
OS_TAG_RULES: dict[str, dict[str, Any]] = {
    "ubuntu": {
        "pattern": r"^\d{2}\.\d{2}$",
        "format": "ubuntu{version}",
        "names": ["ubuntu"],
        "expect": "YY.MM, e.g. 22.04",
    },
    "rhel": {
        "pattern": r"^(?P<major>\d+)(?:\.\d+)?$",
        "format": "rhel{major}",
        "names": ["red hat enterprise linux"],
        "expect": "MAJOR or MAJOR.MINOR, e.g. 9.4",
    },
    "rocky": {
        "pattern": r"^(?P<major>\d+)(?:\.\d+)?$",
        "format": "rocky{major}",
        "names": ["rocky linux"],
        "expect": "MAJOR or MAJOR.MINOR, e.g. 9.5",
    },
    "ol": {
        "pattern": r"^(?P<major>\d+)(?:\.\d+)?$",
        "format": "ol{major}",
        "names": ["oracle linux"],
        "expect": "MAJOR or MAJOR.MINOR, e.g. 9.5",
    },
    "rhcos": {
        "pattern": r"^4\.\d{1,2}$",
        "format": "rhcos{version}",
        "names": ["coreos"],
        "expect": "the OpenShift release 4.MINOR, e.g. 4.15 (not the OSTREE_VERSION 415.92.x)",
    },
    "sles": {
        "pattern": r"^\d+(?:\.\d+|-SP\d+)$",
        "format": "sles{version}",
        "names": ["suse linux enterprise"],
        "expect": "MAJOR.SP or MAJOR-SPn, e.g. 15.6",
    },
    "sl-micro": {
        "pattern": r"^\d+\.\d+$",
        "format": "sl-micro{version}",
        "names": ["suse linux micro", "sl micro"],
        "expect": "MAJOR.MINOR, e.g. 6.0",
    },
    "centos": {
        "pattern": r"^\d+$",
        "format": "centos{version}",
        "names": ["centos"],
        "expect": "MAJOR, e.g. 8",
    },
    "debian": {
        "pattern": r"^\d+$",
        "format": "debian{version}",
        "names": ["debian"],
        "expect": "MAJOR, e.g. 12",
    },
}


class OsTagError(ValueError, FleetError):
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
    parts: dict[str, str] = {}
    if pattern:
        m = re.match(pattern, version_id)
        if not m:
            raise OsTagError(
                "VERSION_ID %r of OS %r does not have the expected form (%s)"
                % (version_id, os_id, rule.get("expect") or pattern)
            )
        parts = {k: v for k, v in m.groupdict().items() if v is not None}
    parts.setdefault("version", version_id)
    parts.setdefault("id", os_id)
    try:
        return rule["format"].format(**parts)
    except (KeyError, IndexError) as e:
        raise OsTagError("os tag rule %r: format %r uses an unknown field %s" % (os_id, rule["format"], e))


def os_image_matches(
    os_id: str, version_id: str, os_image: str, extra_rules: Optional[Mapping[str, Mapping[str, Any]]] = None
) -> Optional[bool]:
    """Whether ``node.status.nodeInfo.osImage`` (``Ubuntu 22.04.4 LTS``) agrees with the labels.

    Returns None when it cannot be judged (unknown ID, empty osImage), else True/False. Checks the
    distribution name and that the version appears (``15.5`` and ``15-SP5`` also match ``15 SP5``).
    """
    if not os_image or not os_id or not version_id:
        return None
    rule = _rules(extra_rules).get(os_id.strip().lower())
    if rule is None or not rule.get("names"):
        return None
    img = os_image.lower()
    if not any(name in img for name in rule["names"]):
        return False
    version = version_id.strip().lower()
    candidates = {version}
    m = re.match(r"^(\d+)(?:\.|-sp)(\d+)$", version)
    if m:
        candidates.add("%s sp%s" % (m.group(1), m.group(2)))
        if m.group(2) == "0":
            candidates.add(m.group(1))
    return any(re.search(r"(?<![\d.])%s(?![\d])" % re.escape(c), img) for c in candidates)
