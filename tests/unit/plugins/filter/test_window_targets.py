"""window_targets: per vendor, one digest of the target version and upgradePolicy of the hosts."""

from __future__ import annotations

import hashlib
import json

from ansible_collections.npuops.fleet.plugins.filter.window_targets import window_targets


def digest(version, policy):
    # written out here, not taken from the product: sha256 of the sorted JSON, 16 hex digits
    blob = json.dumps({"target_version": version, "policy": policy}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


P = {"maxParallelUpgrades": 2, "drain": {"enable": True}}
HV = {
    "g1": {"driver_upgrade_vendor": "nvidia", "driver_upgrade_target_version": "550.90.07", "driver_upgrade_policy": P},
    "g2": {"driver_upgrade_target_version": "550.90.07", "driver_upgrade_policy": dict(reversed(list(P.items())))},
    "n1": {"driver_upgrade_vendor": "rebellions", "driver_upgrade_target_version": "3.0.0"},
    "odd": {"driver_upgrade_vendor": "nvidia", "driver_upgrade_target_version": "560.35.03",
            "driver_upgrade_policy": P},
}


def test_one_digest_per_vendor_whatever_the_key_order():
    assert window_targets(["g1", "g2", "n1"], HV) == {
        "nvidia": [digest("550.90.07", P)], "rebellions": [digest("3.0.0", {})]}


def test_another_version_gives_another_digest_and_a_mixed_vendor_both():
    assert window_targets(["odd"], HV) == {"nvidia": [digest("560.35.03", P)]}
    both = sorted([digest("550.90.07", P), digest("560.35.03", P)])
    assert window_targets(["g1", "odd", "g2"], HV) == {"nvidia": both}


def test_no_hosts_no_targets():
    assert window_targets([], HV) == {}
