"""npu_apt_install: a transaction apt would widen with removals nobody asked for is refused before it runs."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.modules import npu_apt_install as mod

# apt-get --simulate of the CUDA-repository branch change when the host also has the old meta package:
# cuda-drivers-550 loses its dependency and apt resolves that by removing it
SIMULATED = """Reading package lists...
Remv nvidia-driver-550 [550.90.07-0ubuntu1]
Remv cuda-drivers-550 [550.90.07-1]
Inst nvidia-driver-580 (580.126.09-0ubuntu1 NpuopsLab:jammy [amd64])
Conf nvidia-driver-580 (580.126.09-0ubuntu1 NpuopsLab:jammy [amd64])
"""


def run(monkeypatch, capsys, args, simulated, installed):
    calls = []

    def run_command(self, argv, **kw):
        calls.append(argv)
        if argv[0].endswith("dpkg-query"):
            names = [a for a in argv[1:] if not a.startswith("-")]
            rows = [(k, v) for k, v in installed.items() if k.split(":", 1)[0] in names]
            return 0, "".join("%s\t%s\tii \n" % (k, v) for k, v in rows), ""
        if "--simulate" in argv:
            return 0, simulated, ""
        return 0, "", ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(
        AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/usr/bin/" + name
    )
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out), calls


def test_unasked_removal_fails_before_the_transaction(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {"packages": {"nvidia-driver-580": "580.126.09-0ubuntu1"}, "remove": ["nvidia-driver-550"]},
        SIMULATED,
        {"nvidia-driver-550": "550.90.07-0ubuntu1", "cuda-drivers-550": "550.90.07-1"},
    )
    assert res["failed"] is True and res["changed"] is False
    assert res["unasked_removals"] == ["cuda-drivers-550"]
    assert "cuda-drivers-550" in res["msg"] and "nothing was installed" in res["msg"]
    apt = [c for c in calls if c[0].endswith("apt-get")]
    assert len(apt) == 1 and "--simulate" in apt[0], apt  # the real transaction never ran


def test_named_removals_pass_the_check(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {
            "packages": {"nvidia-driver-580": "580.126.09-0ubuntu1"},
            "remove": ["nvidia-driver-550", "cuda-drivers-550"],
        },
        SIMULATED,
        {"nvidia-driver-550": "550.90.07-0ubuntu1", "cuda-drivers-550": "550.90.07-1"},
    )
    apt = [c for c in calls if c[0].endswith("apt-get")]
    assert len(apt) == 2 and "--simulate" in apt[0] and "--simulate" not in apt[1], apt
    assert apt[1][-3:] == ["nvidia-driver-580=580.126.09-0ubuntu1", "cuda-drivers-550-", "nvidia-driver-550-"]
    assert "unasked_removals" not in res


def test_a_foreign_architecture_copy_is_removed_too(monkeypatch, capsys):
    """Debian's Tesla libraries come in i386 copies on multiarch hosts: ``name-`` alone keeps the copy."""
    simulated = (
        "Remv libnvidia-tesla-470-cfg1 [470.256.02-1~deb12u1]\n"
        "Remv libnvidia-tesla-470-cfg1:i386 [470.256.02-1~deb12u1]\n"
        "Inst libnvidia-tesla-535-cfg1 (535.216.03-3~deb12u1 Debian:12 [amd64])\n"
    )
    old = "470.256.02-1~deb12u1"
    installed = {"libnvidia-tesla-470-cfg1": old, "libnvidia-tesla-470-cfg1:i386": old}
    res, calls = run(
        monkeypatch,
        capsys,
        {"packages": {"libnvidia-tesla-535-cfg1": "535.216.03-3~deb12u1"}, "remove": ["libnvidia-tesla-470-cfg1"]},
        simulated,
        installed,
    )
    apt = [c for c in calls if c[0].endswith("apt-get")]
    assert apt[-1][-3:] == [
        "libnvidia-tesla-535-cfg1=535.216.03-3~deb12u1",
        "libnvidia-tesla-470-cfg1-",
        "libnvidia-tesla-470-cfg1:i386-",
    ], apt
    assert "unasked_removals" not in res


NEW = {"nvidia-utils-550-server": "550.90.07-0ubuntu1", "libnvidia-compute-550-server": "550.90.07-0ubuntu1"}
SIM_NEW = """Inst libnvidia-compute-550-server (550.90.07-0ubuntu1 NpuopsLab:jammy [amd64])
Inst nvidia-utils-550-server (550.90.07-0ubuntu1 NpuopsLab:jammy [amd64])
"""
URIS = """'http://mirror.example/pool/libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb' libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb 1044 MD5Sum:26e1
'http://mirror.example/pool/nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb' nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb 3690 MD5Sum:1f9c
"""  # noqa: E501
GOT_404 = """Get:1 http://mirror.example jammy/main amd64 libnvidia-compute-550-server amd64 550.90.07-0ubuntu1 [1044 B]
Err:2 http://mirror.example jammy/main amd64 nvidia-utils-550-server amd64 550.90.07-0ubuntu1
  404  Not Found [IP: 10.0.0.5 80]
E: Failed to fetch http://mirror.example/pool/nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb  404  Not Found [IP: 10.0.0.5 80]
E: Some files failed to download
"""  # noqa: E501


def fetching(monkeypatch, capsys, tmp_path, args, download_rc, download_out, lands):
    """npu_apt_install in check mode against a fake apt whose --download-only writes ``lands`` into a
    temporary apt cache (file name -> bytes)."""
    calls = []
    monkeypatch.setattr(mod, "ARCHIVES", str(tmp_path))

    def run_command(self, argv, **kw):
        calls.append(argv)
        if argv[0].endswith("dpkg-query"):
            return 0, "", ""
        if "--print-uris" in argv:
            return 0, URIS, ""
        if "--download-only" in argv:
            for name, size in lands.items():
                (tmp_path / name).write_bytes(b"x" * size)
            return download_rc, download_out, ""
        if "--simulate" in argv:
            return 0, SIM_NEW, ""
        raise AssertionError("unexpected call %s" % argv)

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(
        AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/usr/bin/" + name
    )
    with patch_module_args(dict(args, _ansible_check_mode=True)):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out), [c for c in calls if c[0].endswith("apt-get")]


def test_a_deb_the_mirror_lost_fails_the_preflight_naming_package_url_and_answer(monkeypatch, capsys, tmp_path):
    res, apt = fetching(monkeypatch, capsys, tmp_path, {"packages": NEW, "download": True, "host": "gpu-7"}, 100,
                        GOT_404, {"libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb": 1044})
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"].startswith(
        "cannot download the target packages from the apt sources of gpu-7 before any cordon: "
        "nvidia-utils-550-server 550.90.07-0ubuntu1 from http://mirror.example/pool/"
        "nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb: 404 Not Found [IP: 10.0.0.5 80]"
    ), res["msg"]
    assert [f["name"] for f in res["fetch_failures"]] == ["nvidia-utils-550-server"]
    assert res["download_bytes"] == 1044 + 3690
    # simulated, listed, fetched into apt's cache - never installed
    assert ["--simulate" in a for a in apt] == [True, False, False]
    assert "--print-uris" in apt[1] and "--download-only" in apt[2] and "Acquire::Retries=2" in apt[2]
    assert all(a[-2:] == apt[0][-2:] for a in apt)  # the same transaction each time


def test_a_download_that_exits_0_but_leaves_a_deb_short_still_fails(monkeypatch, capsys, tmp_path):
    res, _apt = fetching(monkeypatch, capsys, tmp_path, {"packages": NEW, "download": True}, 0, "",
                         {"libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb": 1044,
                          "nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb": 100})
    assert res["failed"] is True
    assert [(f["name"], f["why"]) for f in res["fetch_failures"]] == [
        ("nvidia-utils-550-server", "not in apt's cache after the download")]


def test_fetched_debs_pass_and_a_plan_only_lists_them(monkeypatch, capsys, tmp_path):
    lands = {"libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb": 1044,
             "nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb": 3690}
    res, apt = fetching(monkeypatch, capsys, tmp_path, {"packages": NEW, "download": True}, 0, "", lands)
    assert not res.get("failed") and res["changed"] is True  # the transaction would change; the cache is no change
    assert [d["name"] for d in res["downloads"]] == ["libnvidia-compute-550-server", "nvidia-utils-550-server"]
    assert res["download_bytes"] == 4734 and len(apt) == 3
    plan_cache = tmp_path / "plan"
    plan_cache.mkdir()
    res, apt = fetching(monkeypatch, capsys, plan_cache, {"packages": NEW}, 0, "", {})
    assert not res.get("failed") and res["download_bytes"] == 4734
    assert not any("--download-only" in a for a in apt) and not list(plan_cache.iterdir())


def test_debs_from_a_file_source_are_used_where_they_lie(tmp_path):
    deb = tmp_path / "repo" / "pool" / "x_1.0_amd64.deb"
    deb.parent.mkdir(parents=True)
    deb.write_bytes(b"deb")
    rows = [{"uri": "file:%s" % deb, "file": deb.name, "size": 3, "name": "x", "version": "1.0"},
            {"uri": "file:%s" % (deb.parent / "y_1.0_amd64.deb"), "file": "y_1.0_amd64.deb", "size": 3,
             "name": "y", "version": "1.0"}]
    assert [d["name"] for d in mod.missing_downloads(rows, archives=str(tmp_path / "empty"))] == ["y"]


def test_apt_stopping_before_any_fetch_is_quoted_not_blamed_on_the_mirror(monkeypatch, capsys, tmp_path):
    busy = "E: Could not get lock /var/cache/apt/archives/lock. It is held by process 4242 (apt-get)\n"
    res, _apt = fetching(monkeypatch, capsys, tmp_path, {"packages": NEW, "download": True}, 100, busy, {})
    assert res["failed"] is True
    assert {f["why"] for f in res["fetch_failures"]} == {"not in apt's cache after the download"}
    assert res["msg"].startswith("cannot download the target packages from the apt sources of ")
    assert "before any cordon: E: Could not get lock /var/cache/apt/archives/lock" in res["msg"], res["msg"]
    assert "mirror" not in res["msg"], res["msg"]


def test_a_fetch_that_would_fill_the_disk_is_refused_before_it_starts(monkeypatch, capsys, tmp_path):
    # 100 MiB filesystem with 15 MiB and 1 KiB free: the 4.6 KiB fetch would leave less than 15 % of it
    monkeypatch.setattr(mod, "free_after", lambda path, size: ((15 << 20) + 1024 - size, 100 << 20))
    res, apt = fetching(monkeypatch, capsys, tmp_path, {"packages": NEW, "download": True}, 0, "", {})
    assert res["failed"] is True and "under download_min_free=15% of it (15 MiB" in res["msg"], res["msg"]
    assert not any("--download-only" in a for a in apt)


# ---- the target's modules and the host's GPUs (E3): real .debs built by dpkg-deb, read back by the module
GPU_TABLE = {"chips": [
    {"devid": "0x1BB3", "name": "Tesla P4", "features": []},
    {"devid": "0x2330", "subdevid": "0x16C1", "subvendorid": "0x10DE", "name": "NVIDIA H100 80GB HBM3",
     "features": ["kernelopen", "gsp_proprietary_supported"]},
]}
H100 = {"address": "0000:18:00.0", "device_id": "0x2330", "subsystem_vendor": "0x10de", "subsystem_device": "0x16c1"}
P4 = {"address": "0000:28:00.0", "device_id": "0x1bb3", "subsystem_vendor": "0x10de", "subsystem_device": "0x0000"}
FILES = ["usr/share/doc/*/supported-gpus.json"]


def build_deb(tmp_path, name, files):
    import subprocess

    root = tmp_path / ("src-" + name)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: %s\nVersion: 550.90.07-0ubuntu1\nArchitecture: amd64\nMaintainer: t <t@t.invalid>\n"
        "Description: test\n" % name)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    out = tmp_path / ("%s_550.90.07-0ubuntu1_amd64.deb" % name)
    subprocess.run(["dpkg-deb", "-Zxz", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


def gpu_run(monkeypatch, capsys, tmp_path, gpus, table=True, flavour="open", download=True):
    built = tmp_path / "built"
    built.mkdir()
    # a stray table in a library package that is never searched: only the packages named are read
    debs = [build_deb(built, "libnvidia-compute-550-server",
                      {"usr/share/doc/libnvidia-compute-550-server/supported-gpus.json": "not json"}),
            build_deb(built, "nvidia-driver-550-server-open",
                      {"usr/share/doc/nvidia-driver-550-server/supported-gpus.json": json.dumps(GPU_TABLE)}
                      if table else {"usr/share/doc/nvidia-driver-550-server/README": "no table"})]
    cache = tmp_path / "cache"
    cache.mkdir()
    uris = "".join("'http://mirror.example/pool/%s' %s %d MD5Sum:00\n" % (d.name, d.name, d.stat().st_size)
                   for d in debs)
    monkeypatch.setattr(mod, "ARCHIVES", str(cache))

    def run_command(self, argv, **kw):
        if argv[0].endswith("dpkg-query"):
            return 0, "", ""
        if "--print-uris" in argv:
            return 0, uris, ""
        if "--download-only" in argv:
            for d in debs:
                (cache / d.name).write_bytes(d.read_bytes())
            return 0, "", ""
        if "--simulate" in argv:
            return 0, SIM_NEW, ""
        raise AssertionError("unexpected call %s" % argv)

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: "/usr/bin/" + name)
    packages = {"libnvidia-compute-550-server": "550.90.07-0ubuntu1",
                "nvidia-driver-550-server-open": "550.90.07-0ubuntu1"}
    args = {"packages": packages, "download": download, "host": "gpu-7", "_ansible_check_mode": True,
            "gpu_support": {"module_flavour": flavour, "gpus": gpus, "files": FILES, "flavour": "ubuntu-server-open",
                            "other_flavours": ["ubuntu-server", "cuda-repo"], "packages": ["nvidia-driver-*"],
                            "remedy": "set driver_upgrade_packaging"}}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def test_open_modules_and_a_pascal_gpu_refuse_the_host_before_any_cordon(monkeypatch, capsys, tmp_path):
    res = gpu_run(monkeypatch, capsys, tmp_path, [H100, P4])
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"].startswith(
        "preflight: the target's open kernel modules (packaging ubuntu-server-open) cannot drive 1 of the 2 GPU(s) "
        "of gpu-7, nothing was changed: 0000:28:00.0 (PCI ID 10de:1bb3, Tesla P4) runs only with the proprietary "
        "kernel modules; the proprietary kernel modules drive it: choose a flavour with them (ubuntu-server, "
        "cuda-repo); set driver_upgrade_packaging (NVIDIA's table "), res["msg"]
    assert res["msg"].endswith(
        "nvidia-driver-550-server-open_550.90.07-0ubuntu1_amd64.deb:"
        "usr/share/doc/nvidia-driver-550-server/supported-gpus.json)"), res["msg"]
    assert [g["address"] for g in res["gpu_support"]["unsupported"]] == ["0000:28:00.0"]


def test_gpus_the_target_drives_pass_and_say_where_the_table_came_from(monkeypatch, capsys, tmp_path):
    res = gpu_run(monkeypatch, capsys, tmp_path, [H100])
    assert not res.get("failed"), res.get("msg")
    g = res["gpu_support"]
    assert g["checked"] is True and g["gpus"] == 1 and g["unsupported"] == []
    assert g["source"].endswith(":usr/share/doc/nvidia-driver-550-server/supported-gpus.json")
    (tmp_path / "prop").mkdir()
    res = gpu_run(monkeypatch, capsys, tmp_path / "prop", [P4], flavour="proprietary")
    assert not res.get("failed") and res["gpu_support"]["unsupported"] == []


def test_no_table_or_no_gpu_is_reported_not_refused(monkeypatch, capsys, tmp_path):
    res = gpu_run(monkeypatch, capsys, tmp_path, [P4], table=False)
    assert not res.get("failed"), res.get("msg")
    assert res["gpu_support"]["checked"] is False
    assert res["gpu_support"]["why"] == (
        "none of nvidia-driver-* in the transaction has usr/share/doc/*/supported-gpus.json")
    assert ("the GPUs of gpu-7 were not checked against the target driver's supported-gpus.json: "
            + res["gpu_support"]["why"]) in json.dumps(res["warnings"])
    (tmp_path / "nogpu").mkdir()
    res = gpu_run(monkeypatch, capsys, tmp_path / "nogpu", [])
    assert res["gpu_support"] == {"checked": False, "why": "no GPU of the vendor on the PCI bus", "gpus": 0,
                                  "unsupported": [], "unlisted": []}


def test_a_plan_says_it_has_not_fetched_the_table_yet(monkeypatch, capsys, tmp_path):
    res = gpu_run(monkeypatch, capsys, tmp_path, [P4], download=False)
    assert not res.get("failed") and "not fetched: a plan" not in json.dumps(res.get("warnings")), res
    assert res["gpu_support"]["checked"] is False
    assert res["gpu_support"]["why"].startswith("not checked: the target's packages are not in apt's cache "
                                                "(not fetched: a plan")


# apt-get --simulate of a move onto NVIDIA's branchless 590 names without an active pinning package: the
# named set is at 590.48.01, but nvidia-open (named) depends on nvidia-modprobe (>= 590.48.01), which the
# transaction does not name, so apt takes its candidate - the newest branch
SIMULATED_BRANCHLESS = """Reading package lists...
Inst nvidia-driver-pinning-590.48.01 (590.48.01-1 NpuopsLab:jammy [all])
Inst nvidia-kernel-common (590.48.01-0ubuntu1 NpuopsLab:jammy [amd64])
Inst nvidia-modprobe (610.43.02-1 NpuopsLab:jammy [amd64])
Inst nvidia-dkms-open (590.48.01-0ubuntu1 NpuopsLab:jammy [amd64])
Inst cuda-toolkit-config-common (13.3.1-1 NpuopsLab:jammy [all])
Inst nvidia-driver-pinning-1000 (1000.1.1 NpuopsLab:jammy [all])
Inst nvidia-open (590.48.01-1 NpuopsLab:jammy [amd64])
Conf nvidia-open (590.48.01-1 NpuopsLab:jammy [amd64])
"""
BRANCHLESS_ARGS = {
    "packages": {"nvidia-dkms-open": "590.48.01-0ubuntu1", "nvidia-kernel-common": "590.48.01-0ubuntu1",
                 "nvidia-open": "590.48.01-1", "nvidia-driver-pinning-590.48.01": "590.48.01-1",
                 "nvidia-driver-pinning-1000": "1000.1.1"},
    "driver_version": "590.48.01",
    "driver_families": ["nvidia-*", "libnvidia-*", "cuda-*"],
}


@pytest.mark.parametrize("check_mode", [True, False])
def test_a_dependency_apt_would_take_from_a_newer_branch_refuses_the_transaction(monkeypatch, capsys, check_mode):
    res, calls = run(monkeypatch, capsys, dict(BRANCHLESS_ARGS, _ansible_check_mode=check_mode),
                     SIMULATED_BRANCHLESS, {})
    assert res["failed"] is True and res["changed"] is False
    # the CUDA toolkit's 13.3.1 is not a driver version; what the transaction names (a pinning package
    # whose version looks like a driver's) is at the version asked, not apt's candidate
    assert res["off_target"] == [{"name": "nvidia-modprobe", "to": "610.43.02-1"}]
    assert "candidate for nvidia-modprobe is 610.43.02-1, target 590.48.01" in res["msg"]
    assert "nothing was installed" in res["msg"]
    apt = [c for c in calls if c[0].endswith("apt-get")]
    assert len(apt) == 1 and "--simulate" in apt[0], apt  # neither a download nor the real transaction ran


def test_without_driver_version_the_same_transaction_is_not_judged(monkeypatch, capsys):
    args = {k: v for k, v in BRANCHLESS_ARGS.items() if k != "driver_version"}
    res, calls = run(monkeypatch, capsys, args, SIMULATED_BRANCHLESS, {})
    # the fake apt installs nothing, so the outcome check fails; the transaction itself ran
    assert "off_target" not in res and "candidate for" not in res["msg"], res["msg"]
    assert len([c for c in calls if c[0].endswith("apt-get") and "--simulate" not in c]) == 1
