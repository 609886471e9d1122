from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.module_utils.host import drift_metrics as dm

# The incident host of domain.md after unattended-upgrades: userspace 580.159.03 under a loaded
# 580.126.09 module, the boot kernel 5.15.0-179 with the new module, u-u not blacklisting nvidia-.
INCIDENT = {
    "vendor": "nvidia",
    "running_kernel": "5.15.0-177-generic",
    "boot_kernel": "5.15.0-179-generic",
    "loaded_version": "580.126.09",
    "userspace_version": "580.159.03",
    "on_disk_boot_version": "580.159.03",
    "verdict": "reload_required",
    "reboot_required": True,
    "kernel_reboot_pending": True,
    "held_packages": ["linux-generic"],
    "installed_driver_packages": {"nvidia-utils-580-server": "580.159.03-0ubuntu1",
                                  "libnvidia-compute-580-server": "580.159.03-0ubuntu1",
                                  # the holds leave the container toolkit alone on purpose
                                  "nvidia-container-toolkit": "1.17.8-1",
                                  "libnvidia-container1": "1.17.8-1"},
    "smi": {"status": "mismatch"},
    "device_count": None,
    "booted_kernel_packages": ["linux-image-5.15.0-177-generic"],
    "kernel_meta_packages": ["linux-generic"],
    "unattended_upgrades": {"enabled": True, "uncovered_families": ["linux-image-*", "nvidia-*"]},
}
CHECK = {"last_run": 1700000000.5, "last_success": 1700000000.5, "duration": 0.25, "interval": 10}

EXPECTED_INCIDENT = """\
# HELP npu_driver_version_info Driver version by source (loaded module, userspace, module on disk for the boot kernel).
# TYPE npu_driver_version_info gauge
npu_driver_version_info{vendor="nvidia",source="loaded",version="580.126.09",kernel="5.15.0-177-generic"} 1
npu_driver_version_info{vendor="nvidia",source="userspace",version="580.159.03",kernel=""} 1
npu_driver_version_info{vendor="nvidia",source="on_disk_boot",version="580.159.03",kernel="5.15.0-179-generic"} 1
# HELP npu_driver_verdict 1 for the host's driver verdict, 0 for the others.
# TYPE npu_driver_verdict gauge
npu_driver_verdict{verdict="ok"} 0
npu_driver_verdict{verdict="reload_required"} 1
npu_driver_verdict{verdict="rebuild_required"} 0
npu_driver_verdict{verdict="no_driver"} 0
npu_driver_verdict{verdict="no_devices"} 0
# HELP npu_driver_mismatch 1 when loaded module, boot kernel's module and userspace disagree.
# TYPE npu_driver_mismatch gauge
npu_driver_mismatch{verdict="reload_required"} 1
# HELP npu_driver_smi_status 1 for the smi tool's last status (ok, mismatch, no_devices, no_driver, error, missing).
# TYPE npu_driver_smi_status gauge
npu_driver_smi_status{status="mismatch"} 1
# HELP npu_driver_reboot_pending 1 when a reboot is pending (reboot-required or a newer boot kernel).
# TYPE npu_driver_reboot_pending gauge
npu_driver_reboot_pending 1
# HELP npu_driver_reboot_changes_driver 1 when the next boot loads another driver version than the loaded one.
# TYPE npu_driver_reboot_changes_driver gauge
npu_driver_reboot_changes_driver{kernel="5.15.0-179-generic"} 1
# HELP npu_driver_package_held 1 when the driver or kernel package has dpkg selection hold.
# TYPE npu_driver_package_held gauge
npu_driver_package_held{package="libnvidia-compute-580-server",kind="driver"} 0
npu_driver_package_held{package="nvidia-utils-580-server",kind="driver"} 0
npu_driver_package_held{package="linux-image-5.15.0-177-generic",kind="kernel"} 0
npu_driver_package_held{package="linux-generic",kind="kernel_meta"} 1
# HELP npu_driver_packages_unheld Installed driver and kernel packages without a hold.
# TYPE npu_driver_packages_unheld gauge
npu_driver_packages_unheld 3
# HELP npu_driver_unattended_upgrades_enabled 1 when unattended-upgrades runs periodically.
# TYPE npu_driver_unattended_upgrades_enabled gauge
npu_driver_unattended_upgrades_enabled 1
# HELP npu_driver_unattended_upgrades_can_touch 1 when unattended-upgrades may upgrade driver or kernel packages.
# TYPE npu_driver_unattended_upgrades_can_touch gauge
npu_driver_unattended_upgrades_can_touch 1
# HELP npu_driver_unattended_upgrades_uncovered_info Driver or kernel package families unattended-upgrades may upgrade.
# TYPE npu_driver_unattended_upgrades_uncovered_info gauge
npu_driver_unattended_upgrades_uncovered_info{family="linux-image-*"} 1
npu_driver_unattended_upgrades_uncovered_info{family="nvidia-*"} 1
# HELP npu_driver_ipvs_required 1 when kube-proxy on this host uses IPVS.
# TYPE npu_driver_ipvs_required gauge
npu_driver_ipvs_required 1
# HELP npu_driver_ipvs_loadable 1 when the IPVS module resolves in the boot kernel's module index.
# TYPE npu_driver_ipvs_loadable gauge
npu_driver_ipvs_loadable{kernel="5.15.0-179-generic",module="ip_vs"} 0
npu_driver_ipvs_loadable{kernel="5.15.0-179-generic",module="ip_vs_rr"} 1
# HELP npu_driver_drift_check_success 1 when the last drift check succeeded.
# TYPE npu_driver_drift_check_success gauge
npu_driver_drift_check_success 1
# HELP npu_driver_drift_check_last_run_timestamp_seconds Unix time of the last drift check.
# TYPE npu_driver_drift_check_last_run_timestamp_seconds gauge
npu_driver_drift_check_last_run_timestamp_seconds 1700000000.5
# HELP npu_driver_drift_check_last_success_timestamp_seconds Unix time of the last successful drift check (0 - never).
# TYPE npu_driver_drift_check_last_success_timestamp_seconds gauge
npu_driver_drift_check_last_success_timestamp_seconds 1700000000.5
# HELP npu_driver_drift_check_duration_seconds Duration of the last drift check.
# TYPE npu_driver_drift_check_duration_seconds gauge
npu_driver_drift_check_duration_seconds 0.25
# HELP npu_driver_drift_check_interval_seconds Interval of the drift check timer.
# TYPE npu_driver_drift_check_interval_seconds gauge
npu_driver_drift_check_interval_seconds 10
"""


def test_incident_host_exposition():
    text = dm.render(INCIDENT, CHECK, ipvs={"ip_vs": False, "ip_vs_rr": True}, ipvs_required=True)
    assert text == EXPECTED_INCIDENT


def test_healthy_host_no_ipvs_check_and_unknown_userspace():
    facts = {
        "vendor": "rebellions",
        "running_kernel": "6.8.0-90-generic",
        "boot_kernel": "6.8.0-90-generic",
        "loaded_version": "3.0.0",
        "userspace_version": None,
        "on_disk_boot_version": "3.0.0",
        "verdict": "ok",
        "reboot_required": False,
        "kernel_reboot_pending": False,
        "held_packages": ["rbln-driver"],
        "installed_driver_packages": {"rbln-driver": "3.0.0-1"},
        "booted_kernel_packages": [],
        "kernel_meta_packages": [],
        "unattended_upgrades": {"enabled": False, "uncovered_families": ["rbln-*"]},
        "smi": {"status": "ok"},
        "device_count": 2,
    }
    lines = dm.render(facts, {"last_run": 5, "last_success": 5}).splitlines()
    assert 'npu_driver_smi_status{status="ok"} 1' in lines and "npu_driver_devices 2" in lines
    assert 'npu_driver_version_info{vendor="rebellions",source="userspace",version="",kernel=""} 1' in lines
    assert 'npu_driver_mismatch{verdict="ok"} 0' in lines
    assert "npu_driver_reboot_pending 0" in lines
    assert 'npu_driver_reboot_changes_driver{kernel="6.8.0-90-generic"} 0' in lines
    assert 'npu_driver_package_held{package="rbln-driver",kind="driver"} 1' in lines
    assert "npu_driver_packages_unheld 0" in lines
    # u-u not running: nothing it could touch, no uncovered series
    assert "npu_driver_unattended_upgrades_can_touch 0" in lines
    assert not any("uncovered_info" in line for line in lines)
    assert not any("ipvs" in line for line in lines)
    assert not any("duration" in line or "interval" in line for line in lines)


def test_hold_exclude_can_be_changed():
    lines = dm.render(INCIDENT, CHECK, hold_exclude=[]).splitlines()
    assert 'npu_driver_package_held{package="nvidia-container-toolkit",kind="driver"} 0' in lines
    assert "npu_driver_packages_unheld 5" in lines


def test_versions_compared_by_the_one_rule():
    facts = dict(INCIDENT, loaded_version="580.159.3", on_disk_boot_version="580.159.03-0ubuntu1")
    assert 'npu_driver_reboot_changes_driver{kernel="5.15.0-179-generic"} 0' in dm.render(facts, CHECK)
    # no module loaded, one on disk for the boot kernel: the next boot brings a driver
    facts = dict(INCIDENT, loaded_version=None)
    assert 'npu_driver_reboot_changes_driver{kernel="5.15.0-179-generic"} 1' in dm.render(facts, CHECK)


def test_label_and_help_escaping():
    assert dm.escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert dm.escape_label_value(None) == ""
    assert dm.escape_help('x\\y\n"z"') == 'x\\\\y\\n"z"'
    exp = dm.Exposition()
    exp.family("t", "line1\nline2", [({"v": 'say "hi"\\'}, 2.5)])
    assert exp.text() == (
        '# HELP npu_driver_t line1\\nline2\n# TYPE npu_driver_t gauge\nnpu_driver_t{v="say \\"hi\\"\\\\"} 2.5\n'
    )


def test_failure_exposition_keeps_last_success_only():
    check = {"last_run": 1700000100, "last_success": 1700000000.5, "interval": 10}
    text = dm.render_failure(check, "CalledProcessError")
    assert text == """\
# HELP npu_driver_drift_check_error_info The last drift check's failure.
# TYPE npu_driver_drift_check_error_info gauge
npu_driver_drift_check_error_info{error="CalledProcessError"} 1
# HELP npu_driver_drift_check_success 1 when the last drift check succeeded.
# TYPE npu_driver_drift_check_success gauge
npu_driver_drift_check_success 0
# HELP npu_driver_drift_check_last_run_timestamp_seconds Unix time of the last drift check.
# TYPE npu_driver_drift_check_last_run_timestamp_seconds gauge
npu_driver_drift_check_last_run_timestamp_seconds 1700000100
# HELP npu_driver_drift_check_last_success_timestamp_seconds Unix time of the last successful drift check (0 - never).
# TYPE npu_driver_drift_check_last_success_timestamp_seconds gauge
npu_driver_drift_check_last_success_timestamp_seconds 1700000000.5
# HELP npu_driver_drift_check_interval_seconds Interval of the drift check timer.
# TYPE npu_driver_drift_check_interval_seconds gauge
npu_driver_drift_check_interval_seconds 10
"""


def test_parse_last_success():
    assert dm.parse_last_success(EXPECTED_INCIDENT) == 1700000000.5
    assert dm.parse_last_success(None) == 0.0
    assert dm.parse_last_success("npu_driver_drift_check_last_success_timestamp_seconds x\n") == 0.0
