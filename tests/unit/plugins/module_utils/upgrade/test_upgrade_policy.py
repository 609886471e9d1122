from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import (
    PolicyError,
    max_unavailable_count,
    parse_policy,
    timeout_or_none,
)


def test_defaults_are_chart_defaults():
    p = parse_policy(None)
    assert p.auto_upgrade is False and p.max_parallel_upgrades == 1 and p.max_unavailable == "25%"
    assert (p.wait_for_completion.timeout_seconds, p.wait_for_completion.pod_selector) == (0, "")
    assert (p.pod_deletion.force, p.pod_deletion.timeout_seconds, p.pod_deletion.delete_empty_dir_data) == (
        False,
        300,
        False,
    )
    d = p.drain
    assert (d.enable, d.force, d.delete_empty_dir_data, d.pod_selector, d.timeout_seconds) == (
        False,
        False,
        False,
        "",
        300,
    )
    assert (p.reboot.enable, p.reboot.reboot_timeout_seconds) == (False, 0)


def test_camel_case_helm_values():
    p = parse_policy(
        {
            "autoUpgrade": True,
            "maxParallelUpgrades": 0,
            "maxUnavailable": "50%",
            "waitForCompletion": {"timeoutSeconds": 30, "podSelector": "app=train"},
            "gpuPodDeletion": {"force": True, "timeoutSeconds": 60, "deleteEmptyDirData": True},
            "drain": {
                "enable": True,
                "force": False,
                "deleteEmptyDirData": True,
                "podSelector": "",
                "timeoutSeconds": 10,
            },
            "reboot": {"enable": True, "rebootTimeoutSeconds": 900},
        }
    )
    assert p.max_parallel_upgrades == 0 and p.max_unavailable == "50%"
    assert p.wait_for_completion.pod_selector == "app=train"
    assert p.pod_deletion.force and p.pod_deletion.delete_empty_dir_data
    assert p.drain.enable and p.drain.delete_empty_dir_data and p.drain.timeout_seconds == 10
    assert p.reboot.reboot_timeout_seconds == 900


def test_snake_case_and_npu_alias():
    p = parse_policy(
        {
            "max_unavailable": 2,
            "npu_pod_deletion": {"timeout_seconds": "45"},
            "drain": {"delete_empty_dir_data": "true"},
        }
    )
    assert p.max_unavailable == 2 and p.pod_deletion.timeout_seconds == 45 and p.drain.delete_empty_dir_data


@pytest.mark.parametrize(
    "raw,fragment",
    [
        ({"drian": {}}, "policy.drian: unknown key"),
        ({"drain": {"enabled": True}}, "policy.drain.enabled: unknown key"),
        ({"drain": {"timeoutSeconds": -1}}, "policy.drain.timeoutSeconds"),
        ({"drain": {"timeoutSeconds": "soon"}}, "policy.drain.timeoutSeconds"),
        ({"drain": {"enable": "maybe"}}, "policy.drain.enable must be a boolean"),
        ({"maxUnavailable": "150%"}, "policy.maxUnavailable"),
        ({"maxUnavailable": "x"}, "policy.maxUnavailable"),
        ({"maxParallelUpgrades": True}, "policy.maxParallelUpgrades"),
        ({"drain": "yes"}, "policy.drain must be a mapping"),
        ({"drain": {"podSelector": "a=(b"}}, "policy.drain.podSelector"),
    ],
)
def test_invalid_policies_name_the_key(raw, fragment):
    with pytest.raises(PolicyError) as err:
        parse_policy(raw)
    assert fragment in str(err.value)


def test_max_unavailable_count():
    assert max_unavailable_count("25%", 4) == 1
    assert max_unavailable_count("25%", 5) == 2  # rounded up
    assert max_unavailable_count("25%", 1) == 1
    assert max_unavailable_count(0, 10) == 1  # never blocks every upgrade
    assert max_unavailable_count(3, 10) == 3
    assert timeout_or_none(0) is None and timeout_or_none(5) == 5


def test_nvidia_cluster_policy_spelling():
    """As in the GPU Operator's Helm values / ClusterPolicy: deleteEmptyDir, podDeletion."""
    p = parse_policy(
        {
            "autoUpgrade": True,
            "maxParallelUpgrades": 1,
            "maxUnavailable": "25%",
            "drain": {"deleteEmptyDir": True, "enable": True, "force": False, "timeoutSeconds": 300},
            "podDeletion": {"deleteEmptyDir": True, "force": False, "timeoutSeconds": 300},
            "waitForCompletion": {"timeoutSeconds": 0},
        }
    )
    assert p.drain.delete_empty_dir_data and p.pod_deletion.delete_empty_dir_data


@pytest.mark.parametrize(
    "raw, first, second",
    [
        ({"maxParallelUpgrades": 1, "max_parallel_upgrades": 3},
         "policy.maxParallelUpgrades", "policy.max_parallel_upgrades"),
        ({"gpuPodDeletion": {"force": True}, "npuPodDeletion": {"force": False}},
         "policy.gpuPodDeletion", "policy.npuPodDeletion"),
        ({"drain": {"deleteEmptyDirData": True, "deleteEmptyDir": False}},
         "policy.drain.deleteEmptyDirData", "policy.drain.deleteEmptyDir"),
    ],
)
def test_two_spellings_of_one_field_are_rejected(raw, first, second):
    with pytest.raises(PolicyError) as err:
        parse_policy(raw)
    assert first in str(err.value) and second in str(err.value)


def test_max_unavailable_message_names_both_forms():
    with pytest.raises(PolicyError, match=r"integer or a whole percentage such as '25%'"):
        parse_policy({"maxUnavailable": "12.5%"})
