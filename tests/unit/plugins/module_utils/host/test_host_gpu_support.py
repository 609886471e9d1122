"""Which module flavour drives which GPU (E3): a real excerpt of the 525 driver's table (Ubuntu's
nvidia-driver-525 supported-gpus.json: no chip marked gsp_proprietary_supported), an excerpt shaped as a
560+ table (ids and names as published, features per NVIDIA's rule), and a sysfs tree built here. The
expected answers are NVIDIA's rule read off the tables by hand."""

from __future__ import annotations

import os

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import gpu_support, kernel_log

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


CHIPS = gpu_support.parse_supported_gpus(fixture("supported-gpus-excerpt.json"))
CHIPS_525 = gpu_support.parse_supported_gpus(fixture("supported-gpus-525-excerpt.json"))


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
])
def test_judge_per_flavour_560_table(device, subdevice, open_ok, proprietary_ok):
    g = [gpu("0000:18:00.0", device, subdevice)]
    assert (gpu_support.judge(g, CHIPS, "open")["unsupported"] == []) is open_ok
    assert (gpu_support.judge(g, CHIPS, "proprietary")["unsupported"] == []) is proprietary_ok


@pytest.mark.parametrize("device, subdevice, open_ok, proprietary_ok", [
    ("0x2330", "0x16c1", True, True),    # H100: kernelopen, and a 525 table marks no chip proprietary-capable
    ("0x20b2", "0x1463", True, True),    # A100
    ("0x26b5", "0x169d", True, True),    # L40
    ("0x1db1", "0x0000", False, True),   # V100: no kernelopen
    ("0x102d", "0x0000", False, False),  # K80: legacybranch 470.xx
])
def test_judge_per_flavour_real_525_table(device, subdevice, open_ok, proprietary_ok):
    assert gpu_support.marks_proprietary(CHIPS_525) is False and gpu_support.marks_proprietary(CHIPS) is True
    g = [gpu("0000:18:00.0", device, subdevice)]
    assert (gpu_support.judge(g, CHIPS_525, "open")["unsupported"] == []) is open_ok
    assert (gpu_support.judge(g, CHIPS_525, "proprietary")["unsupported"] == []) is proprietary_ok


def test_a_gpu_the_table_does_not_list_is_reported_not_refused():
    # the 525 table has no Tesla T4 row, yet 525 drives it; NVIDIA's tools take an unknown id as newer
    t4 = gpu("0000:3b:00.0", "0x1eb8", "0x12a2")
    for modules in ("open", "proprietary"):
        res = gpu_support.judge([t4], CHIPS_525, modules)
        assert res == {"unsupported": [], "unlisted": [{"address": "0000:3b:00.0", "device_id": "0x1eb8"}]}


def test_judge_names_the_gpu_and_what_would_drive_it():
    g = [gpu("0000:18:00.0", "0x2330", "0x16c1"), gpu("0000:28:00.0", "0x1bb3"), gpu("0000:38:00.0", "0x102d")]
    res = gpu_support.judge(g, CHIPS, "open")["unsupported"]
    assert [r["address"] for r in res] == ["0000:28:00.0", "0000:38:00.0"]
    assert res[0]["works_with"] == ["proprietary"]
    assert res[0]["why"] == "0000:28:00.0 (PCI ID 10de:1bb3, Tesla P4) runs only with the proprietary kernel modules"
    assert res[1]["works_with"] == ["legacy branch 470.xx"]
    assert "driven only by the legacy branch 470.xx" in res[1]["why"]
    blackwell = gpu_support.judge([gpu("0000:c1:00.0", "0x2901", "0x1999")], CHIPS, "proprietary")["unsupported"]
    assert blackwell[0]["works_with"] == ["open"] and "runs only with the open kernel modules" in blackwell[0]["why"]
    with pytest.raises(ValueError, match="open, proprietary"):
        gpu_support.judge(g, CHIPS, "closed")


def test_subsystem_entry_is_preferred_over_the_bare_device_id():
    chips = gpu_support.parse_supported_gpus(
        '{"chips": [{"devid": "0x1111", "name": "bare", "features": []},'
        ' {"devid": "0x1111", "subdevid": "0x2222", "subvendorid": "0x10de", "name": "board",'
        ' "features": ["kernelopen"]}]}')
    assert gpu_support.judge([gpu("a", "0x1111", "0x2222")], chips, "open")["unsupported"] == []
    assert gpu_support.judge([gpu("a", "0x1111", "0x3333")], chips, "open")["unsupported"][0]["name"] == "bare"


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
    dev("0000:41:00.0", "0x10de", "0x2330", "0x030200")   # passed through to a VM
    (tmp_path / "vfio-pci").mkdir()
    (tmp_path / "0000:41:00.0" / "driver").symlink_to(tmp_path / "vfio-pci")
    (tmp_path / "0000:06:00.0").mkdir()                   # unreadable entry
    got = gpu_support.read_pci_gpus(str(tmp_path))
    assert [(g["address"], g["device_id"]) for g in got] == [("0000:03:00.0", "0x1bb3"), ("0000:18:00.0", "0x2330")]
    assert got[1]["subsystem_device"] == "0x16c1"
    assert gpu_support.read_pci_gpus(str(tmp_path / "absent")) == []


def test_proprietary_module_refusing_blackwell_and_a_release_refusing_a_gpu():
    # a Blackwell GPU and a proprietary module, as dmesg printed it (loaded twice in one boot)
    blackwell = ("[    5.499014] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.105.08  "
                 "Wed Oct 29 23:15:11 UTC 2025\n"
                 "[    5.559842] NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:2c58)\n"
                 "               NVRM: installed in this system requires use of the NVIDIA open kernel modules.\n"
                 "[    5.559858] NVRM: GPU 0000:02:00.0: RmInitAdapter failed! (0x22:0x56:884)\n"
                 "[    8.481576] NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:2c58)\n"
                 "               NVRM: installed in this system requires use of the NVIDIA open kernel modules.\n")
    res = kernel_log.module_flavour_unsupported(blackwell)
    assert res["reason"] == "module flavour not supported on this GPU"
    assert res["devices"] == [{"address": "0000:02:00.0", "pci_id": "10de:2c58",
                               "reason": "module flavour not supported on this GPU"}]
    assert kernel_log.gpu_lost(blackwell)["lost"] is False
    release = ("NVRM: The NVIDIA GPU 0000:04:00.0 (PCI ID: 10de:102d)\n"
               "NVRM: installed in this system is not supported by the\n"
               "NVRM: NVIDIA 535.309.01 driver release.\n"
               "NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
    res = kernel_log.module_flavour_unsupported(release)
    assert res["reason"] == "GPU not supported by this driver release" and res["devices"][0]["pci_id"] == "10de:102d"
    assert kernel_log.gpu_lost(release)["lost"] is False


def test_open_module_refusal_is_not_a_lost_gpu_e3():
    text = fixture("dmesg-open-module-unsupported.txt")
    res = kernel_log.module_flavour_unsupported(text)
    assert res["unsupported"] is True
    assert res["reason"] == "module flavour not supported on this GPU"
    assert res["devices"] == [{"address": "0000:03:00.0", "pci_id": "10de:1bb3",
                               "reason": "module flavour not supported on this GPU"}]
    assert any("not supported by open" in line for line in res["lines"])
    lost = kernel_log.gpu_lost(text)
    assert lost["lost"] is False and lost["reason"] is None and lost["probe_failed"] == 1
    # two GPUs refused, one after the other: both are named
    two = "".join(
        "[    5.93458%d] NVRM: The NVIDIA GPU %s (PCI ID: 10de:1bb3)\n"
        "               NVRM: installed in this system is not supported by open\n"
        "               NVRM: nvidia.ko because it does not include the required GPU\n"
        "               NVRM: System Processor (GSP).\n" % (i, addr) for i, addr in enumerate(["0000:03:00.0",
                                                                                              "0000:04:00.0"]))
    assert [d["address"] for d in kernel_log.module_flavour_unsupported(two)["devices"]] == [
        "0000:03:00.0", "0000:04:00.0"]
    # a second probe failure the refusal does not explain is still a lost GPU
    assert kernel_log.gpu_lost(text.replace("failed for 1 device(s)", "failed for 2 device(s)"))["lost"] is True
    # D16's log is no flavour refusal
    assert kernel_log.module_flavour_unsupported(fixture("dmesg-fallen-off-bus.txt"))["unsupported"] is False


def test_table_read_out_of_a_real_deb_and_its_failures(tmp_path):
    import subprocess

    def deb(name, files, comp="xz"):
        root = tmp_path / ("src-" + name)
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(
            "Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t.invalid>\nDescription: t\n" % name)
        for path, data in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        out = tmp_path / ("%s_1_all.deb" % name)
        subprocess.run(["dpkg-deb", "-Z" + comp, "--build", str(root), str(out)], check=True, capture_output=True)
        return str(out)

    table = b'{"chips": []}'
    with_table = deb("nvidia-driver-550", {"usr/share/doc/nvidia-driver-550/supported-gpus.json": table}, "zstd")
    without = deb("libnvidia-compute-550", {"usr/lib/libx.so": b"x" * 5000})
    globs = ["usr/share/doc/*/supported-gpus.json"]
    text, where, member = gpu_support.table_from_debs([without, with_table], globs)
    assert (text, where, member) == ('{"chips": []}', with_table, "usr/share/doc/nvidia-driver-550/supported-gpus.json")
    assert gpu_support.table_from_debs([without], globs) is None
    with pytest.raises(OSError, match="more than a GPU table"):
        gpu_support.table_from_debs([with_table], globs, max_bytes=4)
    broken = tmp_path / "broken_1_all.deb"
    broken.write_bytes(b"!<arch>\nnot a package")
    with pytest.raises(OSError, match="dpkg-deb --fsys-tarfile .*broken_1_all.deb"):
        gpu_support.table_from_debs([str(broken)], globs)
    # a dpkg-deb that never answers is killed after the timeout, naming the package
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    with pytest.raises(OSError, match="no answer within 1 s"):
        gpu_support.table_from_debs([with_table], globs, dpkg_deb=str(hang), timeout=1)


def test_gpus_of_one_kind_are_said_once():
    g = [gpu("0000:18:00.0", "0x1bb3"), gpu("0000:28:00.0", "0x1bb3"), gpu("0000:38:00.0", "0x102d")]
    bad = gpu_support.judge(g, CHIPS, "open")["unsupported"]
    assert gpu_support.describe(bad) == (
        "0000:18:00.0, 0000:28:00.0 (2 GPUs, PCI ID 10de:1bb3, Tesla P4) run only with the proprietary kernel modules; "
        "0000:38:00.0 (PCI ID 10de:102d, Tesla K80) is driven only by the legacy branch 470.xx")
