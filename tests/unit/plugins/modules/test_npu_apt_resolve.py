"""npu_apt_resolve: each name at the exact upstream version apt offers, one madison call, a missing one
named with apt's offers. apt is played by literal madison output."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.host import apt_output, dpkg_lock
from ansible_collections.npuops.fleet.plugins.modules import npu_apt_resolve as mod

MADISON = """nvidia-driver-550 | 550.127.05-0ubuntu1 | http://lab/ubuntu jammy/main amd64 Packages
nvidia-driver-550 | 550.90.07-0ubuntu1 | http://lab/ubuntu jammy/main amd64 Packages
nvidia-driver-550 | 550.90.07-0ubuntu1 | http://mirror/ubuntu jammy/main amd64 Packages
nvidia-utils-550 | 1:550.90.07-1 | http://lab/ubuntu jammy/main amd64 Packages
libnvidia-compute-550 | 550.90.07.1-1 | http://lab/ubuntu jammy/main amd64 Packages
firmware-nvidia-gsp-550 | 550.90.07-0ubuntu1 | http://lab/ubuntu jammy/main amd64 Packages
"""


def test_parse_madison_keeps_apts_order_once_each():
    assert apt_output.parse_madison(MADISON)["nvidia-driver-550"] == ["550.127.05-0ubuntu1", "550.90.07-0ubuntu1"]
    assert apt_output.parse_madison("N: Unable to locate package foo\n") == {}


@pytest.mark.parametrize(
    "versions, want",
    [
        (["550.127.05-0ubuntu1", "550.90.07-0ubuntu1"], "550.90.07-0ubuntu1"),
        (["1:550.90.07-1"], "1:550.90.07-1"),
        (["550.90.07"], "550.90.07"),
        (["550.90.07.1-1", "550.90.070-1", "550.90.7-1"], None),
    ],
)
def test_offered_at_takes_the_exact_upstream_version(versions, want):
    assert apt_output.offered_at(versions, "550.90.07") == want


FETCH_404 = (100, "", "E: Failed to fetch http://lab/ubuntu/dists/jammy/InRelease  404  Not Found\n")
LISTS_LOCKED = (100, "", "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\n")


def run(monkeypatch, capsys, args, madison=MADISON, updates=((0, "", ""),), check=False):
    calls = []
    answers = list(updates)

    def run_command(self, argv, **kw):
        calls.append([a.rsplit("/", 1)[-1] if i == 0 else a for i, a in enumerate(argv)])
        if argv[0].endswith("apt-get"):
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return 0, madison, ""

    monkeypatch.setattr(mod, "RETRY_DELAY", 0)

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, n, required=False, opt_dirs=None: "/usr/bin/" + n)
    monkeypatch.setattr(dpkg_lock, "wait_for_locks", lambda *a, **k: {"free": True, "waited": 0.0, "holders": []})
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out), calls


def test_resolves_required_and_offered_optional_in_one_madison_call(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {
            "version": "550.90.07",
            "packages": ["nvidia-driver-550", "nvidia-utils-550"],
            "optional": ["firmware-nvidia-gsp-550", "nvidia-fabricmanager-550"],
            "update_cache": True,
        },
    )
    assert res.get("failed") is not True, res
    assert res["resolved"] == {
        "nvidia-driver-550": "550.90.07-0ubuntu1",
        "nvidia-utils-550": "1:550.90.07-1",
        "firmware-nvidia-gsp-550": "550.90.07-0ubuntu1",
    }
    assert calls == [
        ["apt-get", "update", "-q"],
        [
            "apt-cache",
            "madison",
            "nvidia-driver-550",
            "nvidia-utils-550",
            "firmware-nvidia-gsp-550",
            "nvidia-fabricmanager-550",
        ],
    ]


def test_missing_version_fails_naming_the_package_and_apts_offers(monkeypatch, capsys):
    res, _calls = run(
        monkeypatch,
        capsys,
        {
            "version": "550.90.07",
            "packages": ["nvidia-driver-550", "libnvidia-compute-550"],
            "subject": "preflight: nvidia driver 550.90.07",
            "host": "lab-node-1",
        },
    )
    assert res["failed"] is True and res["missing"] == ["libnvidia-compute-550"]
    assert res["msg"] == (
        "preflight: nvidia driver 550.90.07 is not available in the apt sources of lab-node-1: no installable "
        "version for libnvidia-compute-550 (apt offers: nvidia-driver-550=550.127.05-0ubuntu1, "
        "nvidia-driver-550=550.90.07-0ubuntu1, libnvidia-compute-550=550.90.07.1-1)"
    )


def test_check_mode_reads_the_lists_as_they_are(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {"version": "550.90.07", "packages": ["nvidia-driver-550"], "update_cache": True},
        check=True,
    )
    assert res["resolved"] == {"nvidia-driver-550": "550.90.07-0ubuntu1"}
    assert [c[0] for c in calls] == ["apt-cache"]


def test_a_refresh_that_keeps_failing_fails_quoting_apt_after_two_retries(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {"version": "550.90.07", "packages": ["nvidia-driver-550"], "update_cache": True},
        updates=(FETCH_404,),
    )
    assert res["failed"] is True
    assert res["msg"].startswith(
        "apt-get update failed (rc 100): E: Failed to fetch http://lab/ubuntu/dists/jammy/InRelease"
    )
    assert [c[0] for c in calls] == ["apt-get"] * 3


def test_a_lists_lock_taken_after_the_wait_and_a_mirror_hiccup_are_waited_out(monkeypatch, capsys):
    res, calls = run(
        monkeypatch,
        capsys,
        {"version": "550.90.07", "packages": ["nvidia-driver-550"], "update_cache": True},
        updates=(LISTS_LOCKED, FETCH_404, (0, "", "")),
    )
    assert res.get("failed") is not True, res
    assert [c[0] for c in calls] == ["apt-get", "apt-get", "apt-get", "apt-cache"]


def test_an_arch_qualified_name_gets_the_offers_apt_prints_without_it(monkeypatch, capsys):
    res, _calls = run(monkeypatch, capsys, {"version": "550.90.07", "packages": ["nvidia-utils-550:amd64"]})
    assert res["resolved"] == {"nvidia-utils-550:amd64": "1:550.90.07-1"}


# NVIDIA's CUDA repository from 590: branchless names, two branches offered, a pinning package per version.
# apt-cache show stanzas (trimmed to the fields read) and madison as apt prints them
BRANCHLESS_MADISON = {
    "nvidia-open": ["610.43.02-1", "590.48.01-1"],
    "nvidia-driver-open": ["610.43.02-0ubuntu1", "590.48.01-0ubuntu1"],
    "nvidia-driver-pinning-590.48.01": ["590.48.01-1"],
    "nvidia-modprobe": ["610.43.02-1", "590.48.01-1"],
    "libnvidia-gl": ["610.43.02-0ubuntu1", "590.48.01-0ubuntu1"],
    "libnvidia-decode": ["610.43.02-0ubuntu1", "590.48.01-0ubuntu1"],
    "nvidia-settings": ["610.43.02-1"],
}
BRANCHLESS_SHOW = {
    "nvidia-open=590.48.01-1": "Package: nvidia-open\nVersion: 590.48.01-1\n"
    "Depends: nvidia-driver-open (>= 590.48.01) | nvidia-driver (>= 590.48.01),\n nvidia-modprobe (>= 590.48.01)\n",
    "nvidia-driver-open=590.48.01-0ubuntu1": "Package: nvidia-driver-open\nVersion: 590.48.01-0ubuntu1\n"
    "Pre-Depends: debconf\nDepends: libnvidia-gl (= 590.48.01-0ubuntu1), libc6:amd64 (>= 2.34), nvidia-settings\n"
    "Recommends: libnvidia-decode (= 590.48.01-0ubuntu1), nvidia-prime | bumblebee\n",
    "nvidia-modprobe=590.48.01-1": "Package: nvidia-modprobe\nVersion: 590.48.01-1\nDepends: libc6 (>= 2.34)\n",
    "libnvidia-gl=590.48.01-0ubuntu1": "Package: libnvidia-gl\nVersion: 590.48.01-0ubuntu1\n",
    "libnvidia-decode=590.48.01-0ubuntu1": "Package: libnvidia-decode\nVersion: 590.48.01-0ubuntu1\n",
    "nvidia-driver-pinning-590.48.01=590.48.01-1": "Package: nvidia-driver-pinning-590.48.01\nVersion: 590.48.01-1\n",
}


def test_the_closure_names_every_family_dependency_offered_at_the_target(monkeypatch, capsys):
    calls = []

    def run_command(self, argv, **kw):
        calls.append(argv[1:])
        if argv[1] == "show":
            return 0, "\n".join(BRANCHLESS_SHOW.get(a, "") for a in argv[2:]), ""
        return 0, "".join("%s | %s | http://lab jammy/main amd64 Packages\n" % (n, v)
                          for n in argv[2:] for v in BRANCHLESS_MADISON.get(n, [])), ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, n, required=False, opt_dirs=None: "/usr/bin/" + n)
    monkeypatch.setattr(dpkg_lock, "wait_for_locks", lambda *a, **k: {"free": True, "waited": 0.0, "holders": []})
    args = {"version": "590.48.01", "packages": ["nvidia-open", "nvidia-driver-open"],
            "any_version": ["nvidia-driver-pinning-590.48.01"], "closure": ["nvidia-*", "libnvidia-*"]}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert not res.get("failed"), res
    assert res["resolved"] == {
        "nvidia-open": "590.48.01-1", "nvidia-driver-open": "590.48.01-0ubuntu1",
        "nvidia-driver-pinning-590.48.01": "590.48.01-1",
        "nvidia-modprobe": "590.48.01-1", "libnvidia-gl": "590.48.01-0ubuntu1",
        "libnvidia-decode": "590.48.01-0ubuntu1",
    }
    # nvidia-settings is not offered at 590.48.01: apt's to choose (and npu_apt_install's to refuse);
    # libc6 and debconf are not the driver's; the alternative nvidia-driver is satisfied by the named one;
    # a Recommends is followed too (apt-get installs a new package's), a choice among alternatives is not
    assert res["closure"] == ["nvidia-modprobe", "libnvidia-gl", "libnvidia-decode"]
    shows = [c for c in calls if c[0] == "show"]
    assert len(shows) == 2, calls  # round 2 shows the two that joined, round 3 has nothing left


def test_a_pinning_package_the_repository_lacks_is_missing(monkeypatch, capsys):
    res, _calls = run(monkeypatch, capsys, {"version": "550.90.07", "packages": ["nvidia-driver-550"],
                                            "any_version": ["nvidia-driver-pinning-550.90.07"]})
    assert res["failed"] and res["missing"] == ["nvidia-driver-pinning-550.90.07"]
    assert "nvidia-driver-pinning-550.90.07" in res["msg"]
