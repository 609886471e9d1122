"""npu_package_holds: what is held or released, in one dpkg --set-selections, verified by reading back.

dpkg is played by a small table (selections + installed packages); the expectations are literal
package lists. The real dpkg runs under the module in the molecule scenario and the lab's upgrades.
"""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.host import dpkg_lock
from ansible_collections.npuops.fleet.plugins.modules import npu_package_holds as mod

INSTALLED = [
    "nvidia-driver-550",
    "libnvidia-compute-550:amd64",
    "nvidia-container-toolkit",
    "linux-image-5.15.0-119-generic",
    "linux-modules-5.15.0-119-generic",
    "linux-image-5.15.0-107-generic",
    "linux-generic",
    "bash",
]


class Dpkg:
    def __init__(self, held, ignore=(), fail_sets=0, extra=None):
        self.extra = dict(extra or {})  # qualified name -> dpkg status abbreviation, beside INSTALLED ("ii")
        self.sel = {n: "install" for n in INSTALLED + list(self.extra)}
        for n in held:
            self.sel[n] = "hold"
        self.ignore = set(ignore)  # names dpkg answers 0 for and leaves as they were
        self.fail_sets = fail_sets  # --set-selections calls that fail as if the lock was taken
        self.calls = []

    def run_command(self, argv, data=None, **kw):
        self.calls.append((list(argv), data))
        cmd = argv[0].rsplit("/", 1)[-1]
        if cmd == "uname":
            return 0, "5.15.0-119-generic\n", ""
        if cmd == "dpkg-query":
            rows = [(n, "ii") for n in INSTALLED] + list(self.extra.items())
            return 0, "".join("%s\t1.0\t%s \n" % row for row in rows), ""
        if argv[1:] == ["--get-selections"]:
            return 0, "".join("%s\t\t%s\n" % (n, s) for n, s in sorted(self.sel.items())), ""
        if argv[1:] == ["--set-selections"]:
            if self.fail_sets:
                self.fail_sets -= 1
                return 2, "", "dpkg: error: dpkg frontend lock was locked by another process with pid 4242\n"
            for line in data.splitlines():
                name, sel = line.split()
                # a bare name is the package's one instance; with two architectures dpkg refuses it,
                # and the whole input with it
                inst = [k for k in self.sel if k.split(":", 1)[0] == name] if ":" not in name else [name]
                if len(inst) > 1:
                    return (
                        2,
                        "",
                        "dpkg: error: ambiguous package name '%s' with more than one installed instance\n" % name,
                    )
                name = inst[0] if inst else name
                if name.split(":", 1)[0] not in self.ignore:
                    self.sel[name] = sel
            return 0, "", ""
        raise AssertionError(argv)


def run(monkeypatch, capsys, args, dpkg, check=False):
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: dpkg.run_command(argv, **kw))
    monkeypatch.setattr(
        AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/usr/bin/" + name
    )
    monkeypatch.setattr(dpkg_lock, "wait_for_locks", lambda *a, **k: {"free": True, "waited": 0.0, "holders": []})
    monkeypatch.setattr(mod, "SET_RETRY_DELAY", 0)
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def sets(dpkg):
    return [data for argv, data in dpkg.calls if argv[1:] == ["--set-selections"]]


def test_hold_with_discovery_holds_driver_kernel_and_meta_less_excluded(monkeypatch, capsys):
    dpkg = Dpkg(held=["linux-generic"])
    res = run(
        monkeypatch,
        capsys,
        {"state": "held", "discover": True, "vendor": "nvidia", "exclude": ["nvidia-container-toolkit*"]},
        dpkg,
    )
    assert res["changed"] is True
    assert res["wanted"] == [
        "libnvidia-compute-550",
        "linux-generic",
        "linux-image-5.15.0-119-generic",
        "linux-modules-5.15.0-119-generic",
        "nvidia-driver-550",
    ]
    # one dpkg call for every change, by the names dpkg lists; linux-generic was held already, the old kernel is
    # not the booted one
    assert sets(dpkg) == [
        "libnvidia-compute-550:amd64 hold\nlinux-image-5.15.0-119-generic hold\n"
        "linux-modules-5.15.0-119-generic hold\nnvidia-driver-550 hold\n"
    ]
    assert res["held"] == res["wanted"]
    assert res["held_before"] == ["linux-generic"]


def test_release_touches_only_held_matches_and_reports_them(monkeypatch, capsys):
    dpkg = Dpkg(held=["nvidia-driver-550", "nvidia-container-toolkit", "linux-generic"])
    res = run(
        monkeypatch,
        capsys,
        {"state": "released", "patterns": ["nvidia-*", "libnvidia-*"], "exclude": ["nvidia-container-toolkit*"]},
        dpkg,
    )
    # libnvidia-compute-550 matches but was not held: untouched, not reported as released
    assert res["changed_packages"] == ["nvidia-driver-550"]
    assert sets(dpkg) == ["nvidia-driver-550 install\n"]
    assert res["held"] == ["linux-generic", "nvidia-container-toolkit"]


def test_nothing_to_change_makes_no_dpkg_write(monkeypatch, capsys):
    dpkg = Dpkg(held=["nvidia-driver-550"])
    res = run(monkeypatch, capsys, {"state": "held", "names": ["nvidia-driver-550", "not-installed"]}, dpkg)
    assert res["changed"] is False and res["changed_packages"] == []
    assert sets(dpkg) == []


def test_check_mode_reports_without_writing(monkeypatch, capsys):
    dpkg = Dpkg(held=[])
    res = run(monkeypatch, capsys, {"state": "held", "names": ["nvidia-driver-550"]}, dpkg, check=True)
    assert res["changed"] is True and res["changed_packages"] == ["nvidia-driver-550"]
    assert res["held"] == ["nvidia-driver-550"]
    assert sets(dpkg) == []
    assert dpkg.sel["nvidia-driver-550"] == "install"


def test_lock_taken_between_wait_and_write_is_retried(monkeypatch, capsys):
    dpkg = Dpkg(held=[], fail_sets=2)
    res = run(monkeypatch, capsys, {"state": "held", "names": ["nvidia-driver-550"]}, dpkg)
    assert res.get("failed") is not True, res
    assert len(sets(dpkg)) == 3
    assert res["held"] == ["nvidia-driver-550"]


def test_lock_never_free_fails_naming_dpkg_answer(monkeypatch, capsys):
    dpkg = Dpkg(held=[], fail_sets=99)
    res = run(monkeypatch, capsys, {"state": "held", "names": ["nvidia-driver-550"]}, dpkg)
    assert res["failed"] is True
    assert "failed 5 times" in res["msg"] and "pid 4242" in res["msg"]
    assert res["held"] == []


def test_a_hold_dpkg_did_not_take_fails_naming_the_package(monkeypatch, capsys):
    dpkg = Dpkg(held=[], ignore=["libnvidia-compute-550"])
    res = run(monkeypatch, capsys, {"state": "held", "patterns": ["*nvidia-*"], "exclude": ["*toolkit*"]}, dpkg)
    assert res["failed"] is True
    assert res["msg"] == "dpkg --set-selections (hold) left libnvidia-compute-550 not held"
    assert res["changed_packages"] == ["nvidia-driver-550"]


def test_release_left_held_fails(monkeypatch, capsys):
    dpkg = Dpkg(held=["nvidia-driver-550"], ignore=["nvidia-driver-550"])
    res = run(monkeypatch, capsys, {"state": "released", "names": ["nvidia-driver-550"]}, dpkg)
    assert res["failed"] is True
    assert res["msg"] == "dpkg --set-selections (install) left nvidia-driver-550 held"


def test_multi_arch_package_is_held_and_released_on_every_instance(monkeypatch, capsys):
    extra = {"libnvidia-gl-550:amd64": "ii", "libnvidia-gl-550:i386": "ii", "libnvidia-gl-550:armhf": "rc"}
    dpkg = Dpkg(held=["libnvidia-gl-550:amd64"], extra=extra)
    dpkg.sel["libnvidia-gl-550:armhf"] = "deinstall"  # removed, its config files left
    res = run(monkeypatch, capsys, {"state": "held", "names": ["libnvidia-gl-550"]}, dpkg)
    assert res.get("failed") is not True, res
    # held already on amd64, not on i386: the i386 instance is held too, by its qualified name; the
    # removed armhf instance stays as it is
    assert sets(dpkg) == ["libnvidia-gl-550:i386 hold\n"]
    assert dpkg.sel["libnvidia-gl-550:armhf"] == "deinstall"
    assert dpkg.sel["libnvidia-gl-550:i386"] == "hold"
    assert res["changed_packages"] == ["libnvidia-gl-550"]

    dpkg.calls.clear()
    res = run(monkeypatch, capsys, {"state": "released", "patterns": ["libnvidia-*"]}, dpkg)
    assert res.get("failed") is not True, res
    assert sets(dpkg) == ["libnvidia-gl-550:amd64 install\nlibnvidia-gl-550:i386 install\n"]
    assert res["held"] == []


def test_after_a_failed_install_a_half_installed_package_is_held_too(monkeypatch, capsys):
    dpkg = Dpkg(held=[], extra={"nvidia-dkms-580": "iH"})
    installed_only = run(monkeypatch, capsys, {"state": "held", "names": ["nvidia-dkms-580"]}, dpkg)
    assert installed_only["changed_packages"] == []
    dpkg.calls.clear()
    res = run(
        monkeypatch, capsys, {"state": "held", "names": ["nvidia-dkms-580", "gone"], "installed_only": False}, dpkg
    )
    assert res["changed_packages"] == ["nvidia-dkms-580"]
    assert dpkg.sel["nvidia-dkms-580"] == "hold"
