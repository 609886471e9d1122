# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the maintenance window's rollout: the order in which hosts take a lane.

``lane_order(rows)``: ``rows`` is a list of mappings ``{host, reboot, domain, resume}`` (``reboot``: the
host's work reboots it; ``domain``: its failure domain, a zone or rack label value, or None;
``resume``: its node is already in an upgrade, cordoned by an earlier run or failed, optional).
Returns the host names, every host once:

* hosts whose node is already in an upgrade first, in the given order: such a node holds an
  admission slot or counts as unavailable, so a host that waits for admission ahead of it would wait
  for a lane that only its own resumption can free (with one lane: for ever);
* then hosts that reboot: they take longest, and a rolling window ends soonest when its longest
  lanes start first (longest-processing-time-first);
* within each of those two groups, one host per failure domain in turn (the domain with the most
  hosts left goes first, ties by name), so consecutive lanes do not drain the same rack; hosts
  without a domain count as one domain of their own;
* otherwise the order given (the inventory's).

A row without ``host`` raises ValueError naming its index (Ansible reports it as the task's
templating error). Plain exceptions: importing ansible.errors would switch the unit tests' process to
controller mode for the module tests that follow.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UPGRADE_DONE

DOCUMENTATION = r"""
name: lane_order
short_description: Order hosts for the maintenance window's lanes
description:
  - Hosts whose node is already in an upgrade first, then hosts that reboot, then the rest; within the
    last two, spread by failure domain; otherwise in the given order.
options:
  _input:
    description:
      - List of mappings with C(host) (str), C(reboot) (bool), C(domain) (str or null) and optionally
        C(resume) (bool).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- ansible.builtin.debug:
    msg: "{{ rows | npuops.fleet.lane_order }}"  # ['b', 'a']
  vars:
    rows:
      - {host: a, reboot: false, domain: r1}
      - {host: b, reboot: true, domain: r1}
"""

RETURN = r"""
_value:
  description: The host names in lane order.
  type: list
  elements: str
"""


def _spread(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    queues: dict[Any, list[str]] = {}
    for row in rows:
        queues.setdefault(row.get("domain") or None, []).append(str(row["host"]))
    out: list[str] = []
    last: Any = object()
    while queues:
        # most hosts left first keeps the biggest domain from bunching up at the end
        ranked = sorted(queues, key=lambda d: (-len(queues[d]), "" if d is None else str(d)))
        pick = next((d for d in ranked if d != last), ranked[0])
        out.append(queues[pick].pop(0))
        if not queues[pick]:
            del queues[pick]
        last = pick
    return out


def max_parallel_upgrades(policy: Any) -> int:
    """The policy's maxParallelUpgrades (camelCase as in the operators' Helm values, or snake_case;
    default 1, as the GPU Operator's), an int; 0 means no limit. ValueError for a non-number."""
    policy = policy if isinstance(policy, Mapping) else {}
    value = policy.get("maxParallelUpgrades", policy.get("max_parallel_upgrades", 1))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError("maxParallelUpgrades must be a whole number, got %r" % (value,)) from None


def lane_row(result: Mapping[str, Any]) -> dict[str, Any]:
    """A host's preflight result (role driver_upgrade's ``_driver_upgrade_result``) as a lane_order row."""
    return {
        "host": result["host"],
        "reboot": bool(result.get("reboot_planned")),
        "domain": result.get("failure_domain"),
        # in an upgrade, failed or admitted already: anything but no state or upgrade-done
        "resume": (result.get("state_at_start") or "") not in ("", UPGRADE_DONE),
    }


def lane_order(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not isinstance(rows, (list, tuple)):
        raise ValueError("lane_order: expected a list of {host, reboot, domain}, got %s" % type(rows).__name__)
    seen: set[str] = set()
    clean: list[Mapping[str, Any]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or not row.get("host"):
            raise ValueError("lane_order: row %d has no host: %r" % (i, row))
        if str(row["host"]) not in seen:
            seen.add(str(row["host"]))
            clean.append(row)
    resume = [str(r["host"]) for r in clean if r.get("resume")]
    rest = [r for r in clean if not r.get("resume")]
    reboot = [r for r in rest if r.get("reboot")]
    reload_only = [r for r in rest if not r.get("reboot")]
    return resume + _spread(reboot) + _spread(reload_only)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"lane_order": lane_order, "lane_row": lane_row, "max_parallel_upgrades": max_parallel_upgrades}
