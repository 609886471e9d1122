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
