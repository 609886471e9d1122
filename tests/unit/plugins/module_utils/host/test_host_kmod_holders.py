"""Unload order from the kernel's holders, rmmod and lsof output (D1, D18)."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import kmod_holders

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
KNOWN = ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_plain_host_order():
    loaded = {
        "nvidia": ["nvidia_modeset", "nvidia_uvm"],
        "nvidia_modeset": ["nvidia_drm"],
        "nvidia_drm": [],
        "nvidia_uvm": [],
        "drm_kms_helper": ["nvidia_drm"],
    }
    order = kmod_holders.unload_order(loaded, "nvidia", KNOWN)
    assert order == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert kmod_holders.load_order(order) == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]


def test_rdma_host_peermem_before_nvidia_d18():
    # the vendor script's list (uvm, nvidia, peermem) removed nvidia while peermem still used it
    loaded = {
        "nvidia": ["nvidia_peermem", "nvidia_uvm", "nvidia_fs", "gdrdrv"],
        "nvidia_peermem": [],
        "nvidia_uvm": [],
        "nvidia_fs": [],
        "gdrdrv": [],
        "ib_core": ["nvidia_peermem", "ib_uverbs"],
        "ib_uverbs": [],
    }
    order = kmod_holders.unload_order(loaded, "nvidia", KNOWN)
    assert order[-1] == "nvidia"
    assert set(order) == {"nvidia_peermem", "nvidia_uvm", "nvidia_fs", "gdrdrv", "nvidia"}
    assert "ib_core" not in order and "ib_uverbs" not in order


def test_old_peer_mem_module_and_partial_set_d18():
    loaded = {"nvidia": ["nv_peer_mem", "nvidia_uvm"], "nv_peer_mem": [], "nvidia_uvm": []}
    order = kmod_holders.unload_order(loaded, "nvidia", KNOWN)
    assert order == ["nvidia_uvm", "nv_peer_mem", "nvidia"]
    # only what was loaded comes back: no drm / modeset / peermem on this host
    assert kmod_holders.load_order(order) == ["nvidia", "nv_peer_mem", "nvidia_uvm"]


def test_nothing_loaded():
    assert kmod_holders.unload_order({"ext4": []}, "nvidia", KNOWN) == []
    assert kmod_holders.load_order([], fallback=KNOWN) == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]


def test_users_deeper_than_one_level():
    loaded = {"nvidia": ["nvidia_modeset"], "nvidia_modeset": ["nvidia_drm"], "nvidia_drm": []}
    assert kmod_holders.users_of(loaded, "nvidia") == ["nvidia_modeset", "nvidia_drm"]
    assert kmod_holders.unload_order(loaded, "nvidia", ["nvidia"]) == ["nvidia_drm", "nvidia_modeset", "nvidia"]


def test_rmmod_in_use_chain_d1():
    res = kmod_holders.parse_rmmod(fixture("rmmod-in-use-chain.txt"))
    assert [(r["module"], r["in_use"], r["holders"]) for r in res] == [
        ("nvidia_drm", True, []),
        ("nvidia_modeset", True, ["nvidia_drm"]),
        ("nvidia", True, ["nvidia_modeset"]),
    ]
    (fatal,) = kmod_holders.parse_rmmod("modprobe: FATAL: Module nvidia is in use.")
    assert fatal == {"module": "nvidia", "in_use": True, "holders": [], "not_loaded": False}
    (gone,) = kmod_holders.parse_rmmod("rmmod: ERROR: Module nvidia_peermem is not currently loaded")
    assert gone["not_loaded"] and not gone["in_use"]


def test_lsof_holders_named_by_full_command_line_d1():
    rows = kmod_holders.parse_lsof(fixture("lsof-dev-nvidia.txt"))
    assert [(r["command"], r["pid"]) for r in rows] == [
        ("nvidia-pe", 1346),
        ("nvidia-pe", 1346),
        ("nvidia-pe", 1346),
        ("Xorg", 3019),
        ("Xorg", 3019),
    ]
    users = kmod_holders.device_users([(r["pid"], r["name"]) for r in rows], "/dev/nvidia")
    assert users == {
        1346: ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-modeset"],
        3019: ["/dev/nvidia0", "/dev/nvidiactl"],
    }
    procs = kmod_holders.describe_processes(
        users, {1346: "/usr/bin/nvidia-persistenced --user nvidia-persistenced", 3019: "/usr/lib/xorg/Xorg vt1"}
    )
    assert kmod_holders.in_use_reason("nvidia", 17, ["nvidia_modeset"], procs) == (
        "module in use: nvidia held by module nvidia_modeset; "
        "pid 1346 (/usr/bin/nvidia-persistenced --user nvidia-persistenced); pid 3019 (/usr/lib/xorg/Xorg vt1)"
    )


def test_use_count_without_holder_is_a_process_d1():
    assert kmod_holders.in_use_reason("nvidia", 15, [], []) == "module in use: nvidia held by a process (use count 15)"
    assert kmod_holders.in_use_reason("nvidia", 0, [], []) is None
