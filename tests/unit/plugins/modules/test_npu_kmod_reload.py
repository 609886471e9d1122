"""npu_kmod_reload: services stopped, modules removed users first, loaded back by their file's name, or
the holders named and nothing loaded. The kernel is played by scripted command answers; the module
reads its unload order through driver_facts.gather, replaced here by literal facts."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.host import driver_facts
from ansible_collections.npuops.fleet.plugins.modules import npu_kmod_reload as mod

LOADED = {
    "unload_order": ["nvidia_uvm", "nvidia_modeset", "nvidia"],
    "load_order": ["nvidia", "nvidia_modeset", "nvidia_uvm"],
    "modprobe_names": {"nvidia": "nvidia-current", "nvidia_modeset": "nvidia-current-modeset"},
}
HELD = {
    "device_holders": [{"pid": 1346, "cmdline": "/usr/bin/nvidia-persistenced --user x", "devices": ["/dev/nvidia0"]}],
    "in_use_reason": "module in use: nvidia; pid 1346 (/usr/bin/nvidia-persistenced --user x)",
}


def run(monkeypatch, capsys, args, answers, active=("nvidia-persistenced.service",), facts_break_after=None):
    calls = []
    gathered = []

    def run_command(self, argv, **kw):
        argv = [a.rsplit("/", 1)[-1] if i == 0 else a for i, a in enumerate(argv)]
        calls.append(argv)
        if argv[:2] == ["systemctl", "is-active"]:
            return (0 if argv[-1] in active else 3), "", ""
        return answers.get(tuple(argv), (0, "", ""))

    def gather(runner, profile, params):
        if facts_break_after is not None and len(gathered) >= facts_break_after:
            raise OSError("journal unreadable")
        gathered.append(dict(params))
        return dict(LOADED, **(HELD if params.get("device_holders") else {}))

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(
        AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/sbin/" + name
    )
    monkeypatch.setattr(driver_facts, "gather", gather)
    with patch_module_args(dict({"vendor": "nvidia"}, **args)):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out), calls, gathered


def test_reload_stops_active_services_unloads_users_first_and_loads_by_file_name(monkeypatch, capsys):
    res, calls, _gathered = run(monkeypatch, capsys, {"services": ["nvidia-persistenced", "nvidia-fabricmanager"]}, {})
    assert res["reload"] == "done" and res["changed"] is True
    assert res["stopped_services"] == ["nvidia-persistenced"]
    acting = [c for c in calls if c[0] in ("rmmod", "modprobe") or c[:2] == ["systemctl", "stop"]]
    assert acting == [
        ["systemctl", "stop", "nvidia-persistenced.service"],
        ["rmmod", "nvidia_uvm"],
        ["rmmod", "nvidia_modeset"],
        ["rmmod", "nvidia"],
        ["modprobe", "nvidia-current"],
        ["modprobe", "nvidia-current-modeset"],
        ["modprobe", "nvidia_uvm"],
    ]


def test_in_use_with_reboot_allowed_loads_nothing_and_says_why(monkeypatch, capsys):
    answers = {("rmmod", "nvidia"): (1, "", "rmmod: ERROR: Module nvidia is in use\n")}
    res, calls, gathered = run(monkeypatch, capsys, {"reboot_allowed": True, "stop_services": False}, answers)
    assert res.get("failed") is not True and res["reload"] == "in_use"
    assert res["reload_impossible_why"] == (
        "rmmod: ERROR: Module nvidia is in use; module in use: nvidia; pid 1346 (/usr/bin/nvidia-persistenced --user x)"
    )
    assert res["unloaded"] == ["nvidia_uvm", "nvidia_modeset"]
    assert not [c for c in calls if c[0] == "modprobe" or c[0] == "systemctl"]
    assert [g.get("device_holders") for g in gathered] == [False, True]


def test_in_use_without_reboot_fails_naming_the_holder(monkeypatch, capsys):
    answers = {("rmmod", "nvidia"): (1, "", "rmmod: ERROR: Module nvidia is in use\n")}
    res, calls, _gathered = run(monkeypatch, capsys, {"reboot_allowed": False}, answers)
    assert res["failed"] is True
    assert res["msg"].startswith(
        "module reload impossible: rmmod: ERROR: Module nvidia is in use; module in use: nvidia; pid 1346"
    )
    assert not [c for c in calls if c[0] == "modprobe"]


def test_modprobe_failure_fails_quoting_it(monkeypatch, capsys):
    answers = {("modprobe", "nvidia-current"): (1, "", "modprobe: ERROR: could not insert 'nvidia': No such device\n")}
    res, _calls, _gathered = run(monkeypatch, capsys, {}, answers)
    assert res["failed"] is True
    assert (
        res["msg"]
        == "modprobe nvidia-current failed (rc 1): modprobe: ERROR: could not insert 'nvidia': No such device"
    )
    assert res["loaded"] == []


def test_modprobe_failure_names_what_the_kernel_log_says_of_the_gpus(monkeypatch, capsys):
    klog = {"reason": "module flavour not supported on this GPU", "devices": ["0000:03:00.0"],
            "lines": ["[    5.934570] NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1bb3)",
                      "               NVRM: installed in this system is not supported by open"]}
    monkeypatch.setitem(LOADED, "kernel_log", klog)
    answers = {("modprobe", "nvidia-current"): (1, "", "modprobe: ERROR: could not insert 'nvidia': No such device\n")}
    res, _calls, gathered = run(monkeypatch, capsys, {"pci_devices_dir": "/run/sim/pci", "kernel_log_file": "/k"},
                                answers)
    assert res["failed"] is True and res["kernel_log"] == klog
    assert res["msg"] == (
        "modprobe nvidia-current failed (rc 1): modprobe: ERROR: could not insert 'nvidia': No such device; "
        "module flavour not supported on this GPU (0000:03:00.0; kernel log: [    5.934570] NVRM: The NVIDIA GPU "
        "0000:03:00.0 (PCI ID: 10de:1bb3) / NVRM: installed in this system is not supported by open)")
    assert gathered[-1]["pci_devices_dir"] == "/run/sim/pci" and gathered[-1]["kernel_log_file"] == "/k"


def test_the_kernel_log_is_read_only_for_no_such_device_and_never_hides_modprobes_words(monkeypatch, capsys):
    monkeypatch.setitem(LOADED, "kernel_log", {"reason": "GPU lost (hardware/PCIe)", "devices": ["0000:b3:00.0"],
                                               "lines": ["NVRM: Xid (PCI:0000:b3:00): 79"]})
    # a signature the kernel refused: the log's last load is an earlier one, not this modprobe's
    answers = {("modprobe", "nvidia-current"): (1, "", "modprobe: ERROR: could not insert 'nvidia': Key was "
                                                       "rejected by service\n")}
    res, _calls, gathered = run(monkeypatch, capsys, {}, answers)
    assert res["msg"].endswith("Key was rejected by service") and "kernel_log" not in res, res
    assert len(gathered) == 1  # the unload order only
    answers = {("modprobe", "nvidia-current"): (1, "", "modprobe: ERROR: could not insert 'nvidia': No such device\n")}
    # the facts cannot be read again: modprobe's words still come back
    res, _calls, _gathered = run(monkeypatch, capsys, {}, answers, facts_break_after=1)
    assert res["failed"] is True and res["msg"] == (
        "modprobe nvidia-current failed (rc 1): modprobe: ERROR: could not insert 'nvidia': No such device")
    res, _calls, _gathered = run(monkeypatch, capsys, {}, answers)
    assert res["msg"].startswith("modprobe nvidia-current failed (rc 1): modprobe: ERROR: could not insert 'nvidia': "
                                 "No such device; GPU lost (hardware/PCIe) (0000:b3:00.0; kernel log: NVRM: Xid")
    # a probe failure that names no GPU is not blamed on the hardware
    monkeypatch.setitem(LOADED, "kernel_log", {"reason": "GPU lost (hardware/PCIe)", "devices": [],
                                               "lines": ["NVRM: The NVIDIA probe routine failed for 1 device(s)."]})
    res, _calls, _gathered = run(monkeypatch, capsys, {}, answers)
    assert res["msg"].endswith("No such device; the driver's probe failed for the host's GPUs (kernel log: NVRM: The "
                               "NVIDIA probe routine failed for 1 device(s).)"), res["msg"]
