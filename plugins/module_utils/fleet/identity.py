# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Host-to-Node identity: is the machine Ansible reached the one behind the Node it is mapped to?

Both sides know the same machine facts, because the kubelet reads them from the host it runs on:

===============  ===========================================  ======================================
field            host side (``npu_driver_facts`` ``identity``)  Node side (what the kubelet reports)
===============  ===========================================  ======================================
``machine_id``   ``/etc/machine-id`` (``/var/lib/dbus/...``)  ``status.nodeInfo.machineID``
``system_uuid``  ``/sys/class/dmi/id/product_uuid``          ``status.nodeInfo.systemUUID``
``boot_id``      ``/proc/sys/kernel/random/boot_id``         ``status.nodeInfo.bootID``
``hostname``     the kernel host name (``uname -n``)          label ``kubernetes.io/hostname``
===============  ===========================================  ======================================

A field is compared only when both sides have a value (a VM without DMI data has no product_uuid,
and then the kubelet reports none either). The host is the Node's machine when at least one field
was compared and none differs; anything else refuses the host before any change.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

FIELDS = ("machine_id", "system_uuid", "boot_id", "hostname")
HOSTNAME_LABEL = "kubernetes.io/hostname"

_WHY = {
    "boot_id": "a host that rebooted moments ago: wait until its kubelet reports the new boot id, then rerun",
    "hostname": "a kubelet started with --hostname-override: leave hostname out of the compared fields",
}


def node_identity(node: Mapping[str, Any]) -> dict[str, Optional[str]]:
    """The identity fields as a Node object (dict, as the API returns it) reports them; "" -> None."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {
        "machine_id": info.get("machineID") or None,
        "system_uuid": info.get("systemUUID") or None,
        "boot_id": info.get("bootID") or None,
        "hostname": labels.get(HOSTNAME_LABEL) or None,
    }


def normalised(field: str, value: Any) -> Optional[str]:
    """The comparable form of one field's value (UUIDs and ids without dashes, lower case); None when empty."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if field in ("machine_id", "system_uuid", "boot_id"):
        text = text.replace("-", "")
    return text or None


def _same_host_name(host: str, label: str) -> bool:
    # The kubelet labels the node with its lower-cased host name, which may be the short name or the
    # FQDN of the same machine depending on how the host name was set.
    if host == label:
        return True
    short, dotted = (host, label) if "." not in host else (label, host)
    return "." not in short and "." in dotted and dotted.split(".", 1)[0] == short


def compare(host: Mapping[str, Any], node: Mapping[str, Any], fields: Iterable[str] = FIELDS) -> dict[str, Any]:
    """Compare host and node identity dicts (keys of FIELDS; other keys ignored).

    Returns ``{"compared": [field...], "unknown": [field...], "mismatches": [{"field", "host",
    "node"}...], "same": bool}``; values in mismatches are as given (not normalised), so a message
    quotes what each side really said. ``same`` is true only when something was compared and
    nothing differs. Raises ValueError for a field name not in FIELDS."""
    fields = list(fields)
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise ValueError("unknown identity field(s) %s; known: %s" % (", ".join(bad), ", ".join(FIELDS)))
    out: dict[str, Any] = {"compared": [], "unknown": [], "mismatches": []}
    for field in fields:
        h, n = normalised(field, host.get(field)), normalised(field, node.get(field))
        if h is None or n is None:
            out["unknown"].append(field)
            continue
        out["compared"].append(field)
        same = _same_host_name(h, n) if field == "hostname" else h == n
        if not same:
            out["mismatches"].append({"field": field, "host": host.get(field), "node": node.get(field)})
    out["same"] = bool(out["compared"]) and not out["mismatches"]
    return out


def refusal(host_name: str, node_name: str, result: Mapping[str, Any]) -> Optional[str]:
    """The message that refuses the host, naming both values of every differing field; None when
    ``result`` (from compare) says the host is the Node's machine."""
    if result.get("same"):
        return None
    if not result.get("compared"):
        return (
            "host %s cannot be matched to node %s: no identity field is known on both sides (unknown: %s); "
            "the host is refused so that no other machine's node is drained"
            % (host_name, node_name, ", ".join(result.get("unknown") or []) or "none asked")
        )
    parts = []
    alone = len(result["mismatches"]) == 1  # the innocent readings apply only when nothing else differs
    for m in result["mismatches"]:
        why = _WHY.get(m["field"]) if alone else None
        parts.append("%s: host %s, node %s%s" % (m["field"], m["host"], m["node"], " (or %s)" % why if why else ""))
    return (
        "host %s is not the machine behind node %s (%s); fix the inventory's node name for this host "
        "(driver_upgrade_node_name) - nothing was changed" % (host_name, node_name, "; ".join(parts))
    )
