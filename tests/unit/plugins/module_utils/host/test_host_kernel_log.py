"""Kernel log, needrestart and fabric manager messages (D2, D3, D10, D16); expected values read off
the fixtures by hand."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import kernel_log, needrestart

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_fallen_off_the_bus_three_lines_d16():
    res = kernel_log.gpu_lost(fixture("dmesg-fallen-off-bus.txt"))
    assert res["lost"] is True
    assert res["reason"] == "GPU lost (hardware/PCIe)"
    assert res["devices"] == ["0000:b3:00.0"]
    assert res["probe_failed"] == 1
    assert kernel_log.loaded_version(fixture("dmesg-fallen-off-bus.txt")) == "570.158.01"


def test_gpu_lost_one_line_forms_d16():
    xid = "[ 99.1] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus."
    assert kernel_log.gpu_lost(xid)["devices"] == ["0000:44:00"]
    smi = "Unable to determine the device handle for GPU 000:BA:80.0: Unknown Error"
    assert kernel_log.gpu_lost(smi)["devices"] == ["000:ba:80.0"]
    ok = "[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 2024"
    assert kernel_log.gpu_lost(ok) == {"lost": False, "devices": [], "probe_failed": None, "lines": [], "reason": None}
    assert kernel_log.loaded_version(ok) == "550.90.07"


def test_secure_boot_key_rejected_d3():
    res = kernel_log.module_refused(fixture("secureboot-key-rejected.txt"))
    assert res["refused"] is True and res["module"] == "nvidia"
    assert res["reason"] == "module present but refused by the kernel (signature / Secure Boot)"
    assert res["lines"] == ["modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"]
    assert kernel_log.module_refused("modprobe: ERROR: could not insert 'nvidia': Required key not available")[
        "refused"
    ]
    assert kernel_log.module_refused("Loading of module with unavailable key is rejected")["refused"]
    assert not kernel_log.module_refused("modprobe: FATAL: Module nvidia not found.")["refused"]


def test_fabricmanager_mismatch_d2():
    res = kernel_log.fabricmanager_mismatch(fixture("fabricmanager-mismatch.log"))
    assert [r["message"] for r in res] == [
        "fabricmanager 530.30.02 != driver 530.41.03",
        "fabricmanager 550.127.05 != driver 550.120",
    ]
    assert res[1]["driver"] == "550.120"


def test_needrestart_batch_current_d10():
    res = needrestart.parse_batch(fixture("needrestart-batch.txt"))
    assert res["kernel_status"] == "current"
    assert res["kernel_reboot_pending"] is False
    assert res["kernel_current"] == "5.15.0-71-generic" and res["kernel_expected"] == "5.15.0-71-generic"
    assert res["values"]["VER"] == "3.5"


def test_needrestart_pending_and_unknown_d10():
    for ksta in ("2", "3"):
        res = needrestart.parse_batch("NEEDRESTART-KCUR: 5.15.0-71-generic\nNEEDRESTART-KSTA: %s\n" % ksta)
        assert res["kernel_status"] == "pending" and res["kernel_reboot_pending"] is True
    for text in ("NEEDRESTART-KSTA: 0\n", "NEEDRESTART-VER: 3.5\n", ""):
        res = needrestart.parse_batch(text)
        assert res["kernel_status"] == "unknown" and res["kernel_reboot_pending"] is None
