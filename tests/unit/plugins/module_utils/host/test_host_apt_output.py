"""apt / dpkg output parsers against the shared cases' fixtures (D4, D6, D7, D8); expected values are
read off the fixtures by hand."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import apt_output

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_held_broken_message_quoted_by_ansible_d6():
    text = fixture("apt-held-broken-packages.txt")
    assert apt_output.held_broken(text)
    assert apt_output.apt_errors(text) == ["E: Unable to correct problems, you have held broken packages."]
    assert apt_output.failure_lines(text) == ["E: Unable to correct problems, you have held broken packages."]


def test_unmet_dependency_from_apt_stdout_d6():
    out = (
        "Some packages could not be installed.\n"
        "The following packages have unmet dependencies:\n"
        " nvidia-driver-440-server : Depends: libnvidia-gl-440-server (= 440.95.01-0ubuntu0.20.04.1)"
        " but it is not going to be installed\n"
        "E: Unable to correct problems, you have held broken packages.\n"
    )
    (entry,) = apt_output.unmet_dependencies(out)
    assert entry["package"] == "nvidia-driver-440-server"
    assert entry["dependency"] == "libnvidia-gl-440-server"
    assert (entry["relation"], entry["version"]) == ("=", "440.95.01-0ubuntu0.20.04.1")
    assert entry["reason"] == "it is not going to be installed"
    assert entry["to_install"] is None
    assert apt_output.failure_lines(out) == [
        "The following packages have unmet dependencies:",
        "nvidia-driver-440-server : Depends: libnvidia-gl-440-server (= 440.95.01-0ubuntu0.20.04.1)"
        " but it is not going to be installed",
        "E: Unable to correct problems, you have held broken packages.",
    ]


def test_kernel_common_pin_first_block_d7():
    entries = apt_output.unmet_dependencies(fixture("apt-kernel-common-pin.txt"))
    kernels = apt_output.blocking_kernels(entries)
    assert [k["kernel"] for k in kernels] == ["5.11.0-25-generic", "5.11.0-27-generic"]
    assert kernels[0]["package"] == "linux-modules-nvidia-470-5.11.0-25-generic"
    assert kernels[0]["allows"] == "470.57.02"
    assert kernels[0]["to_install"] == "470.63.01"
    assert kernels[0]["message"] == "kernel 5.11.0-25-generic: precompiled nvidia modules only for 470.57.02"


def test_kernel_common_lagging_second_block_d7():
    entries = apt_output.unmet_dependencies(fixture("apt-kernel-common-pin.txt"))
    # 2 + 2 Depends lines, 5 Recommends continuation lines of nvidia-driver-530
    assert len(entries) == 9
    recs = [e for e in entries if e["kind"] == "Recommends"]
    assert len(recs) == 5 and {e["package"] for e in recs} == {"nvidia-driver-530"}
    assert recs[0]["dependency"] == "libnvidia-compute-530" and not recs[0]["blocking"]
    lag = [u for u in apt_output.unsatisfied(entries) if u["package"] == "nvidia-kernel-common-530"]
    assert lag == [
        {
            "package": "nvidia-kernel-common-530",
            "needs": ">= 530.41.03",
            "to_install": "530.30.02-0ubuntu1",
            "required_by": ["nvidia-dkms-530", "nvidia-driver-530"],
        }
    ]
    lines = apt_output.failure_lines(fixture("apt-kernel-common-pin.txt"))
    assert lines[0] == "The following packages have unmet dependencies:"
    assert (
        "nvidia-dkms-530 : Depends: nvidia-kernel-common-530 (>= 530.41.03) but 530.30.02-0ubuntu1 is to be installed"
        in lines
    )
    assert not any("Recommends" in x for x in lines)
    assert (
        lines[-1] == "E: Unmet dependencies. Try 'apt --fix-broken install' with no packages (or specify a solution)."
    )


def test_kept_back_d8():
    text = fixture("apt-kept-back-nvidia.txt")
    names = apt_output.kept_back(text)
    assert len(names) == 16
    assert names[0] == "libnvidia-cfg1-460" and names[-1] == "nvidia-driver-460"
    assert "libnvidia-fbc1-460" in names and "nvidia-compute-utils-460" in names
    lines = apt_output.failure_lines(text)
    assert lines[0] == "The following packages have been kept back:"
    assert len(lines) == 3 and lines[2].endswith("nvidia-compute-utils-460 nvidia-driver-460")


def test_transitional_packages_d8():
    text = fixture("apt-transitional-packages.txt")
    rows = apt_output.parse_apt_list(text)
    assert [r["name"] for r in rows] == ["libnvidia-compute-470", "cuda-drivers-fabricmanager-460"]
    assert rows[0]["version"] == "510.54-1pop0~1645544462~21.10~e35d257"
    assert rows[0]["upgradable_from"] == "470.86-1pop0~1637635465~21.10~47710c4"
    assert rows[1]["suites"] == ["jammy-updates", "jammy-security"]
    assert rows[1]["transitional_for"] == "cuda-drivers-fabricmanager-510"
    assert (
        apt_output.branch_drift(rows[0]["name"], rows[0]["version"])
        == "libnvidia-compute-470 is at 510.54 (transitional)"
    )
    assert apt_output.branch_drift(rows[1]["name"], rows[1]["version"]) == (
        "cuda-drivers-fabricmanager-460 is at 510.85.02 (transitional)"
    )
    (removed,) = apt_output.parse_dpkg_actions(text)
    assert removed == {
        "action": "removing",
        "name": "nvidia-driver-460",
        "version": "470.161.03-0ubuntu0.20.04.1",
        "old_version": None,
    }
    assert (
        apt_output.branch_drift(removed["name"], removed["version"])
        == "nvidia-driver-460 is at 470.161.03 (transitional)"
    )


def test_branch_of_name_and_version():
    assert apt_output.branch_of_name("libnvidia-fbc1-455") == "455"
    assert apt_output.branch_of_name("nvidia-driver-550-server-open") == "550"
    assert apt_output.branch_of_name("linux-modules-nvidia-470-5.11.0-25-generic") == "470"
    assert apt_output.branch_of_name("nvidia-driver") is None
    assert apt_output.branch_of_version("1:535.261.03-1") == "535"
    assert apt_output.branch_drift("nvidia-driver-550-server-open", "550.90.07-0ubuntu1") is None
    assert apt_output.branch_drift("nvidia-driver", "550.90.07-1") is None


def test_dpkg_l_half_configured_d4():
    rows = apt_output.parse_dpkg_l(fixture("dpkg-l-half-configured.txt"))
    assert [(r["state"], r["name"], r["interrupted"]) for r in rows] == [
        ("iU", "linux-generic", True),
        ("iF", "linux-headers-6.12.10-76061203-generic", True),
    ]
    assert rows[0]["version"] == "6.12.10-76061203.202412060638~1740098661~24.04~f50b0de~dev"
    assert rows[0]["arch"] == "amd64"
    header = (
        "Desired=Unknown/Install/Remove/Purge/Hold\n||/ Name Version Architecture\n+++-====\n"
        "ii  nvidia-smi  535.261.03-1  amd64\nrc  old  1  amd64\n"
    )
    assert [(r["name"], r["interrupted"]) for r in apt_output.parse_dpkg_l(header)] == [
        ("nvidia-smi", False),
        ("old", False),
    ]
    assert apt_output.interrupted_state("iHR") and apt_output.interrupted_state("hiR")
    assert not apt_output.interrupted_state("hi ")


def test_dpkg_failed_packages_d4():
    text = fixture("apt-dkms-build-fail.txt")
    assert apt_output.dpkg_failed_packages(text) == ["nvidia-dkms-580-open", "nvidia-driver-580-open"]
    lines = apt_output.failure_lines(text)
    assert "Error! Bad return status for module build on kernel: 6.17.9-76061709-generic (x86_64)" in lines
    assert "dpkg: error processing package nvidia-dkms-580-open (--configure):" in lines


TARGETS = {"nvidia-driver-460": "460.91.03-0ubuntu1", "libnvidia-compute-460": "460.91.03-0ubuntu1"}


def test_install_exit_0_but_kept_back_fails_d8():
    res = apt_output.install_outcome(
        0,
        fixture("apt-kept-back-nvidia.txt"),
        "",
        TARGETS,
        {"nvidia-driver-460": "460.73.01-0ubuntu1", "libnvidia-compute-460": "460.73.01-0ubuntu1"},
    )
    assert res["ok"] is False
    assert res["not_at_target"] == {
        "libnvidia-compute-460": "460.73.01-0ubuntu1",
        "nvidia-driver-460": "460.73.01-0ubuntu1",
    }
    assert "nvidia-driver-460" in res["kept_back"]
    assert res["msg"].startswith("apt-get exited 0 but the driver did not move; not at the target version: ")
    assert "libnvidia-compute-460 460.73.01-0ubuntu1 (wanted 460.91.03-0ubuntu1)" in res["msg"]
    assert "apt said: The following packages have been kept back: | libnvidia-cfg1-460" in res["msg"]


def test_install_held_broken_quotes_unmet_lines_d6():
    out = (
        "The following packages have unmet dependencies:\n"
        " nvidia-driver-460 : Depends: libnvidia-gl-460 (= 460.91.03-0ubuntu1) but it is not going to be installed\n"
    )
    res = apt_output.install_outcome(
        100, out, "E: Unable to correct problems, you have held broken packages.\n", TARGETS, {}
    )
    assert res["ok"] is False
    assert res["unmet"] == [
        "nvidia-driver-460 : Depends: libnvidia-gl-460 (= 460.91.03-0ubuntu1) but it is not going to be installed"
    ]
    assert res["not_at_target"] == {"libnvidia-compute-460": None, "nvidia-driver-460": None}
    assert res["msg"].endswith(
        "apt said: The following packages have unmet dependencies: | nvidia-driver-460 : Depends: libnvidia-gl-460 "
        "(= 460.91.03-0ubuntu1) but it is not going to be installed | "
        "E: Unable to correct problems, you have held broken packages."
    )


def test_install_dkms_build_failure_names_kernel_and_log_d4():
    res = apt_output.install_outcome(100, fixture("apt-dkms-build-fail.txt"), "", {"x": "1"}, {"x": "1"})
    assert res["ok"] is False and res["dpkg_failed"] == ["nvidia-dkms-580-open", "nvidia-driver-580-open"]
    assert (
        "DKMS module build failed for kernel 6.17.9-76061709-generic; see /var/lib/dkms/nvidia/580.119.02/"
        in res["msg"]
    )


def test_install_ok():
    res = apt_output.install_outcome(
        0, "Setting up nvidia-driver-460 (460.91.03-0ubuntu1) ...\n", "", TARGETS, dict(TARGETS)
    )
    assert res["ok"] is True and res["msg"] is None and res["not_at_target"] == {}


def test_simulated_branch_change_from_the_lab_apt():
    # apt-get -s on a lab host (535 -> 550 branch change): six removals, six new packages
    t = apt_output.simulated_transaction(fixture("apt-simulate-branch-change.txt"))
    assert [r["name"] for r in t["remove"]] == [
        "nvidia-driver-535-server-open", "nvidia-utils-535-server", "libnvidia-compute-535-server",
        "libnvidia-common-535-server", "nvidia-compute-utils-535-server", "nvidia-dkms-535-server-open"]
    assert {r["version"] for r in t["remove"]} == {"535.183.06-0ubuntu1"}
    assert len(t["install"]) == 6 and t["install"][0] == {
        "name": "libnvidia-common-550-server", "from": None, "to": "550.90.07-0ubuntu1"}
    assert {i["to"] for i in t["install"]} == {"550.90.07-0ubuntu1"}


def test_simulated_upgrade_and_purge_lines():
    # apt's forms for an upgrade (installed version in brackets) and, with --purge, a purge
    text = ("Inst nvidia-kernel-dkms [535.216.03-2~bpo12+1] (535.261.03-1 Debian:12.12/stable [amd64]) []\n"
            "Purg firmware-nvidia-gsp [535.216.03-2~bpo12+1]\n"
            "Conf nvidia-kernel-dkms (535.261.03-1 Debian:12.12/stable [amd64])\n")
    assert apt_output.simulated_transaction(text) == {
        "install": [{"name": "nvidia-kernel-dkms", "from": "535.216.03-2~bpo12+1", "to": "535.261.03-1"}],
        "remove": [{"name": "firmware-nvidia-gsp", "version": "535.216.03-2~bpo12+1"}],
    }


def test_release_holds_in_a_copy_of_dpkg_status():
    status = ("Package: nvidia-utils-535-server\nStatus: hold ok installed\nVersion: 535.183.06-0ubuntu1\n\n"
              "Package: linux-image-5.15.0-107-generic\nStatus: hold ok installed\n\n"
              "Package: openssl\nStatus: install ok installed\n")
    out = apt_output.release_holds_in_status(status, ["nvidia-utils-535-server:amd64"])
    assert out.splitlines()[1] == "Status: install ok installed"  # released
    assert out.splitlines()[5] == "Status: hold ok installed"      # the kernel stays held
    assert out.count("\n") == status.count("\n")


# apt-get install --print-uris -qq on a lab host (apt 2.6.1), one source served over HTTP
PRINT_URIS = """'http://127.0.0.1:8080/pool/libnvidia-common-550-server_550.90.07-0ubuntu1_all.deb' libnvidia-common-550-server_550.90.07-0ubuntu1_all.deb 862 MD5Sum:4e3cc77a9a54b17dc1fe4910f36e4771
'http://127.0.0.1:8080/pool/libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb' libnvidia-compute-550-server_550.90.07-0ubuntu1_amd64.deb 1044 MD5Sum:26e1ad076e92c9b6691ff07d9cc10cf1
'http://deb.debian.org/debian/pool/main/u/util-linux/bsdutils_1%3a2.38.1-5+deb12u3_amd64.deb' bsdutils_1%3a2.38.1-5+deb12u3_amd64.deb 94412 SHA256:0a1b2c
"""  # noqa: E501

# apt-get install --download-only when the mirror lost one .deb (same host, same apt)
FETCH_404 = """Get:1 http://127.0.0.1:8080 jammy/main amd64 libnvidia-common-550-server all 550.90.07-0ubuntu1 [862 B]
Get:2 http://127.0.0.1:8080 jammy/main amd64 libnvidia-compute-550-server amd64 550.90.07-0ubuntu1 [1044 B]
Err:3 http://127.0.0.1:8080 jammy/main amd64 nvidia-utils-550-server amd64 550.90.07-0ubuntu1
  404  File not found [IP: 127.0.0.1 8080]
Fetched 1906 B in 0s (0 B/s)
E: Failed to fetch http://127.0.0.1:8080/pool/nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb  404  File not found [IP: 127.0.0.1 8080]
E: Some files failed to download
"""  # noqa: E501


def test_print_uris_lists_each_deb_with_its_size_name_and_version():
    rows = apt_output.parse_print_uris("Reading package lists...\n" + PRINT_URIS)
    assert [(r["name"], r["version"], r["size"]) for r in rows] == [
        ("libnvidia-common-550-server", "550.90.07-0ubuntu1", 862),
        ("libnvidia-compute-550-server", "550.90.07-0ubuntu1", 1044),
        ("bsdutils", "1:2.38.1-5+deb12u3", 94412),  # the epoch's colon, as apt writes it in a file name
    ]
    assert rows[0]["uri"] == "http://127.0.0.1:8080/pool/libnvidia-common-550-server_550.90.07-0ubuntu1_all.deb"
    assert rows[2]["file"] == "bsdutils_1%3a2.38.1-5+deb12u3_amd64.deb" and rows[2]["hash"] == "SHA256:0a1b2c"
    assert apt_output.parse_print_uris("") == []


def test_fetch_failures_name_the_package_its_url_and_the_mirrors_answer():
    assert apt_output.fetch_failures(FETCH_404) == [{
        "uri": "http://127.0.0.1:8080/pool/nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb",
        "why": "404 File not found [IP: 127.0.0.1 8080]",
        "name": "nvidia-utils-550-server",
        "version": "550.90.07-0ubuntu1",
    }]
    # a list that failed is named by its URL (no package)
    lists = ("E: Failed to fetch file:/srv/r/dists/lab/main/binary-amd64/Packages"
             "  File not found - /srv/r/x (2: No such file)")
    assert [(f["name"], f["uri"]) for f in apt_output.fetch_failures(lists)] == [
        ("", "file:/srv/r/dists/lab/main/binary-amd64/Packages")]
