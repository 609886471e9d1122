"""Which module flavour drives which GPU (E3): NVIDIA's table excerpt and a sysfs tree built here; the
expected answers are NVIDIA's rule read off the table by hand (kernelopen = open, + gsp_proprietary_supported
= both, no kernelopen = proprietary only, legacybranch = neither)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import gpu_support, kernel_log

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


CHIPS = gpu_support.parse_supported_gpus(fixture("supported-gpus-excerpt.json"))


def gpu(address, device, subdevice="0x0000"):
    return {"address": address, "device_id": device, "subsystem_vendor": "0x10de", "subsystem_device": subdevice}


def test_parse_normalizes_ids_and_features():
    h100 = [c for c in CHIPS if c["name"] == "NVIDIA H100 80GB HBM3"][0]
    assert h100["devid"] == "0x2330" and h100["subdevid"] == "0x16c1" and h100["subvendorid"] == "0x10de"
    assert h100["features"] == ["kernelopen", "gsp_proprietary_supported", "gsp_proprietary_default"]
    k80 = [c for c in CHIPS if c["devid"] == "0x102d"][0]
    assert k80["legacybranch"] == "470.xx" and k80["subdevid"] is None


@pytest.mark.parametrize("text, words", [
    ("not json", "not JSON"),
    ('{"gpus": []}', "no 'chips' list"),
    ('{"chips": [{"name": "x"}]}', "chips[0] has no hexadecimal devid"),
    ('[1, 2]', "no 'chips' list"),
])
def test_parse_refuses_what_is_not_the_table(text, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        gpu_support.parse_supported_gpus(text)


@pytest.mark.parametrize("device, subdevice, open_ok, proprietary_ok", [
    ("0x2330", "0x16c1", True, True),    # Hopper: both
    ("0x20b2", "0x1463", True, True),    # Ampere: both
    ("0x1bb3", "0x0000", False, True),   # Pascal: proprietary only
    ("0x1db1", "0x0000", False, True),   # Volta: proprietary only
    ("0x2901", "0x1999", True, False),   # Blackwell: open only
    ("0x102d", "0x0000", False, False),  # Kepler: legacy 470.xx only
    ("0x9999", "0x0000", False, False),  # not in the table
])
def test_judge_per_flavour(device, subdevice, open_ok, proprietary_ok):
    g = [gpu("0000:18:00.0", device, subdevice)]
    assert (gpu_support.judge(g, CHIPS, "open") == []) is open_ok
    assert (gpu_support.judge(g, CHIPS, "proprietary") == []) is proprietary_ok


def test_judge_names_the_gpu_and_what_would_drive_it():
    g = [gpu("0000:18:00.0", "0x2330", "0x16c1"), gpu("0000:28:00.0", "0x1bb3"), gpu("0000:38:00.0", "0x102d")]
    res = gpu_support.judge(g, CHIPS, "open")
    assert [r["address"] for r in res] == ["0000:28:00.0", "0000:38:00.0"]
    assert res[0]["works_with"] == ["proprietary"]
    assert res[0]["why"] == "0000:28:00.0 (PCI ID 10de:1bb3, Tesla P4) runs only with the proprietary kernel modules"
    assert res[1]["works_with"] == ["legacy branch 470.xx"]
    assert "driven only by the legacy branch 470.xx" in res[1]["why"]
    blackwell = gpu_support.judge([gpu("0000:c1:00.0", "0x2901", "0x1999")], CHIPS, "proprietary")
    assert blackwell[0]["works_with"] == ["open"] and "runs only with the open kernel modules" in blackwell[0]["why"]
    unknown = gpu_support.judge([gpu("0000:c1:00.0", "0x9999")], CHIPS, "proprietary")
    assert unknown[0]["works_with"] == [] and "is not in the target driver's supported-gpus.json" in unknown[0]["why"]
    with pytest.raises(ValueError, match="open, proprietary"):
        gpu_support.judge(g, CHIPS, "closed")


def test_subsystem_entry_is_preferred_over_the_bare_device_id():
    chips = gpu_support.parse_supported_gpus(
        '{"chips": [{"devid": "0x1111", "name": "bare", "features": []},'
        ' {"devid": "0x1111", "subdevid": "0x2222", "subvendorid": "0x10de", "name": "board",'
        ' "features": ["kernelopen"]}]}')
    assert gpu_support.judge([gpu("a", "0x1111", "0x2222")], chips, "open") == []
    assert gpu_support.judge([gpu("a", "0x1111", "0x3333")], chips, "open")[0]["name"] == "bare"


def test_read_pci_gpus_keeps_nvidia_display_and_3d_controllers(tmp_path):
    def dev(addr, vendor, device, cls):
        d = tmp_path / addr
        d.mkdir()
        for k, v in {"vendor": vendor, "device": device, "class": cls, "subsystem_vendor": "0x10de",
                     "subsystem_device": "0x16c1"}.items():
            (d / k).write_text(v + "\n")

    dev("0000:18:00.0", "0x10de", "0x2330", "0x030200")   # 3D controller
    dev("0000:03:00.0", "0x10de", "0x1BB3", "0x030000")   # VGA
    dev("0000:05:00.0", "0x10de", "0x22a3", "0x068000")   # NVSwitch: a bridge, not a GPU
    dev("0000:00:02.0", "0x8086", "0x5916", "0x030000")   # another vendor's GPU
    (tmp_path / "0000:06:00.0").mkdir()                   # unreadable entry
    got = gpu_support.read_pci_gpus(str(tmp_path))
    assert [(g["address"], g["device_id"]) for g in got] == [("0000:03:00.0", "0x1bb3"), ("0000:18:00.0", "0x2330")]
    assert got[1]["subsystem_device"] == "0x16c1"
    assert gpu_support.read_pci_gpus(str(tmp_path / "absent")) == []


def test_open_module_refusal_is_not_a_lost_gpu_e3():
    text = fixture("dmesg-open-module-unsupported.txt")
    res = kernel_log.module_flavour_unsupported(text)
    assert res["unsupported"] is True
    assert res["reason"] == "module flavour not supported on this GPU"
    assert res["devices"] == [{"address": "0000:03:00.0", "pci_id": "10de:1bb3"}]
    assert any("not supported by open" in line for line in res["lines"])
    lost = kernel_log.gpu_lost(text)
    assert lost["lost"] is False and lost["reason"] is None and lost["probe_failed"] == 1
    # a second probe failure the refusal does not explain is still a lost GPU
    assert kernel_log.gpu_lost(text.replace("failed for 1 device(s)", "failed for 2 device(s)"))["lost"] is True
    # D16's log is no flavour refusal
    assert kernel_log.module_flavour_unsupported(fixture("dmesg-fallen-off-bus.txt"))["unsupported"] is False
