from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import na_to_none
from ansible_collections.npuops.fleet.plugins.module_utils.host.smi_parsers import (
    classify_nvidia_smi,
    parse_nvidia_smi_query,
    parse_nvrm_api_mismatch,
    parse_proc_driver_nvidia_version,
    parse_rbln_smi,
)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_proc_driver_legacy_c2():
    # two spaces around the version; first line only
    assert parse_proc_driver_nvidia_version(fixture("proc-driver-nvidia-version-legacy.txt")) == "520.56.06"


def test_proc_driver_open_module():
    assert parse_proc_driver_nvidia_version(fixture("proc-driver-nvidia-version-open.txt")) == "580.126.09"


def test_proc_driver_garbage():
    assert parse_proc_driver_nvidia_version("") is None
    assert parse_proc_driver_nvidia_version("GCC version: gcc version 12.2.0") is None


def test_nvrm_api_mismatch_syslog_012_c3():
    line = (
        "May 21 15:58:07 gpu-7 kernel: [  412.1] NVRM: API mismatch: the client has the version 535.54.03, "
        "but#012NVRM: this kernel module has the version 530.30.02.  Please make sure that this kernel "
        "module and all NVIDIA driver components have the same version."
    )
    assert parse_nvrm_api_mismatch(line) == {"client_version": "535.54.03", "kernel_version": "530.30.02"}


def test_nvrm_api_mismatch_dmesg_two_lines():
    text = (
        "NVRM: API mismatch: the client has the version 535.54.03, but\n"
        "NVRM: this kernel module has the version 530.30.02.  Please make sure..."
    )
    assert parse_nvrm_api_mismatch(text)["kernel_version"] == "530.30.02"
    assert parse_nvrm_api_mismatch("all fine") is None


def test_nvidia_smi_query_ok():
    text = fixture("nvidia-smi-query-ok.txt")
    assert classify_nvidia_smi(text, 0)["status"] == "ok"
    rows = parse_nvidia_smi_query(text, ["index", "driver_version", "name", "memory.total"])
    assert rows == [
        {"index": 0, "driver_version": "580.126.09", "name": "NVIDIA GeForce RTX 5090", "memory_total": "32607 MiB"}
    ]


def test_nvidia_smi_query_na_fields_c17():
    text = fixture("nvidia-smi-query-na-fields.txt")
    fields = ["clocks.sm", "clocks.max.sm", "index", "temperature.gpu", "utilization.gpu", "x", "y"]
    rows = parse_nvidia_smi_query(text, fields)
    assert len(rows) == 2
    assert rows[0]["utilization_gpu"] is None  # [N/A] (MIG enabled)
    assert rows[1]["utilization_gpu"] is None  # [Not Supported]
    assert rows[0]["temperature_gpu"] == "44"
    assert rows[1]["index"] == 0
    assert classify_nvidia_smi(text, 0)["status"] == "ok"


def test_nvidia_smi_fewer_columns_than_fields():
    rows = parse_nvidia_smi_query("0, 550.90.07", ["index", "driver_version", "name"])
    assert rows == [{"index": 0, "driver_version": "550.90.07", "name": None}]


def test_nvidia_smi_unknown_error_is_null():
    rows = parse_nvidia_smi_query("0, [Unknown Error], [GPU is lost]", ["index", "driver_version", "name"])
    assert rows[0]["driver_version"] is None and rows[0]["name"] is None


def test_nvidia_smi_no_devices_c17():
    text = fixture("nvidia-smi-no-devices.txt")
    res = classify_nvidia_smi(text, 6)
    assert res["status"] == "no_devices"
    assert res["message"] == "No devices were found"
    assert parse_nvidia_smi_query(text) == []


def test_nvidia_smi_no_driver():
    res = classify_nvidia_smi(fixture("nvidia-smi-no-driver.txt"), 9)
    assert res["status"] == "no_driver"
    assert res["library_version"] is None


def test_nvidia_smi_nvml_mismatch_gives_library_version():
    res = classify_nvidia_smi(fixture("nvidia-smi-nvml-mismatch.txt"), 18)
    assert res["status"] == "mismatch"
    assert res["library_version"] == "580.159"
    assert res["message"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert parse_nvidia_smi_query(fixture("nvidia-smi-nvml-mismatch.txt")) == []


def test_nvidia_smi_nvml_library_version_570_c17():
    text = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n"
    assert classify_nvidia_smi(text, 18)["library_version"] == "570.124"


def test_nvidia_smi_other_error():
    assert classify_nvidia_smi("Failed to initialize NVML: Unknown Error", 255)["status"] == "error"
    assert classify_nvidia_smi("", 1)["status"] == "error"


def test_rbln_smi_two_devices():
    res = parse_rbln_smi(fixture("rbln-smi-two-devices.txt"))
    assert res["kmd_version"] == "3.0.0"
    assert len(res["devices"]) == 2
    d0, d1 = res["devices"]
    assert d0 == {
        "npu": 0,
        "name": "RBLN-CA25",
        "device": "rbln0",
        "pci_bus_id": "0000:05:00.0",
        "temp": "37C",
        "power": "58.7W",
        "perf": "P14",
        "memory_used": "0.0B",
        "memory_total": "15.7GiB",
        "util": "0.0",
    }
    # blank cells (second device) -> None, not an exception
    assert d1["name"] is None and d1["power"] is None
    assert d1["device"] == "rbln1" and d1["pci_bus_id"] == "0000:06:00.0"


def test_rbln_smi_empty():
    assert parse_rbln_smi("") == {"kmd_version": None, "devices": []}


def test_na_to_none():
    assert na_to_none(" [Not Supported] ") is None
    assert na_to_none("N/A") is None
    assert na_to_none(" 12 ") == "12"
