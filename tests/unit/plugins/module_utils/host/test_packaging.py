"""Packaging flavours: detection from installed packages, target sets, what a branch or flavour change
removes, and buildability (headers, Secure Boot). Package names are the archives' own (apt-cache of
Debian bookworm/trixie, Ubuntu's nvidia-graphics-drivers-*-server and linux-restricted-modules,
NVIDIA's CUDA repository)."""

from __future__ import annotations

import ast
import inspect

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver import vendor_profiles
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import ProfileError, resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.host import packaging

NV = resolve_profile("nvidia")

UBUNTU_DKMS_535 = [
    "nvidia-driver-535-server-open",
    "nvidia-dkms-535-server-open",
    "libnvidia-compute-535-server",
    "libnvidia-common-535-server",
    "nvidia-utils-535-server",
    "nvidia-compute-utils-535-server",
    "nvidia-kernel-common-535-server",
    "nvidia-kernel-source-535-server-open",
    "nvidia-container-toolkit",
]
UBUNTU_PRECOMPILED_535 = [
    "linux-modules-nvidia-535-server-open-5.15.0-119-generic",
    "linux-modules-nvidia-535-server-open-5.15.0-107-generic",
    "linux-objects-nvidia-535-server-open-5.15.0-119-generic",
    "nvidia-kernel-common-535-server",
    "libnvidia-compute-535-server",
    "libnvidia-common-535-server",
    "nvidia-utils-535-server",
    "nvidia-compute-utils-535-server",
    "linux-image-5.15.0-119-generic",
]
# FINDINGS.md: the headless Debian set apt installs for nvidia-kernel-dkms + nvidia-smi + libnvidia-ml1
DEBIAN_535 = [
    "nvidia-kernel-dkms",
    "nvidia-smi",
    "libnvidia-ml1",
    "firmware-nvidia-gsp",
    "nvidia-persistenced",
    "nvidia-alternative",
    "nvidia-kernel-support",
    "libnvidia-cfg1",
    "nvidia-legacy-check",
    "nvidia-kernel-common",
    "nvidia-installer-cleanup",
    "nvidia-modprobe",
    "dkms",
]
DEBIAN_TESLA_535 = [
    "nvidia-tesla-535-kernel-dkms",
    "nvidia-tesla-535-smi",
    "libnvidia-tesla-535-ml1",
    "firmware-nvidia-tesla-535-gsp",
    "nvidia-tesla-535-alternative",
    "nvidia-tesla-535-kernel-support",
    "nvidia-kernel-common",
    "nvidia-installer-cleanup",
    "nvidia-modprobe",
    "dkms",
]
# CUDA repository: cuda-drivers-550 pulls Ubuntu-named packages at NVIDIA's versions
CUDA_REPO_550 = ["cuda-drivers-550", "cuda-drivers", "nvidia-driver-550", "nvidia-dkms-550", "libnvidia-compute-550"]


@pytest.mark.parametrize(
    "installed,name",
    [
        (UBUNTU_DKMS_535, "ubuntu-server-open"),
        ([n.replace("-open", "") for n in UBUNTU_DKMS_535], "ubuntu-server"),
        (UBUNTU_PRECOMPILED_535, "ubuntu-precompiled-server-open"),
        ([n.replace("-server-open", "-server") for n in UBUNTU_PRECOMPILED_535], "ubuntu-precompiled-server"),
        (DEBIAN_535, "debian"),
        (["nvidia-open-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "firmware-nvidia-gsp"], "debian-open"),
        (DEBIAN_TESLA_535, "debian-tesla"),
        (CUDA_REPO_550, "cuda-repo"),
        (["nvidia-open-570", "nvidia-driver-570-open", "nvidia-dkms-570-open"], "cuda-repo-open"),
        (["nvidia-open", "nvidia-kernel-open-dkms"], "cuda-repo-open"),
    ],
)
def test_detects_the_installed_flavour(installed, name):
    got = packaging.choose(NV, installed)
    assert (got["name"], got["source"]) == (name, "detected")
    assert got["evidence"]


def test_a_host_without_a_driver_gets_the_default_and_a_request_wins():
    assert packaging.choose(NV, ["bash", "dkms"])[("name")] == "ubuntu-server-open"
    assert packaging.choose(NV, ["bash"])["source"] == "default"
    got = packaging.choose(NV, DEBIAN_TESLA_535, "debian")
    assert (got["name"], got["source"], got["evidence"]) == ("debian", "requested", [])
    assert [f["name"] for f in got["installed_flavours"]] == ["debian-tesla"]
    with pytest.raises(
        packaging.PackagingError, match="'debain' is not in vendor profile 'nvidia'; known: auto, cuda-repo-open"
    ):
        packaging.choose(NV, DEBIAN_535, "debain")


def test_an_explicit_packages_list_is_what_gets_installed():
    p = resolve_profile("nvidia", {"packages": ["nvidia-headless-{branch}-server", "nvidia-utils-{branch}-server"]})
    got = packaging.choose(p, UBUNTU_DKMS_535)
    assert (got["name"], got["source"], got["build"]) == ("packages", "profile", "dkms")
    assert packaging.target_packages(got, "550.90.07", "k") == ["nvidia-headless-550-server", "nvidia-utils-550-server"]


def test_target_sets():
    fl = packaging.choose(NV, UBUNTU_PRECOMPILED_535)
    assert packaging.target_packages(fl, "550.127.05", "5.15.0-121-generic") == [
        "linux-modules-nvidia-550-server-open-5.15.0-121-generic",
        "nvidia-kernel-common-550-server",
        "libnvidia-compute-550-server",
        "libnvidia-common-550-server",
        "nvidia-utils-550-server",
        "nvidia-compute-utils-550-server",
    ]
    deb = packaging.choose(NV, DEBIAN_535)
    assert packaging.target_packages(deb, "535.261.03", "6.1.0-50-amd64") == [
        "nvidia-kernel-dkms",
        "nvidia-smi",
        "libnvidia-ml1",
        "firmware-nvidia-gsp",
    ]


def test_a_branch_change_removes_the_old_branch_and_its_per_kernel_modules():
    fl = packaging.choose(NV, UBUNTU_PRECOMPILED_535)
    target = packaging.target_packages(fl, "550.127.05", "5.15.0-119-generic")
    assert packaging.leaving_packages(fl, fl, UBUNTU_PRECOMPILED_535, target, "550.127.05") == [
        "libnvidia-common-535-server",
        "libnvidia-compute-535-server",
        "linux-modules-nvidia-535-server-open-5.15.0-107-generic",
        "linux-modules-nvidia-535-server-open-5.15.0-119-generic",
        "nvidia-compute-utils-535-server",
        "nvidia-kernel-common-535-server",
        "nvidia-utils-535-server",
    ]
    # in-branch: nothing leaves, not even the other kernel's module package
    assert packaging.leaving_packages(fl, fl, UBUNTU_PRECOMPILED_535, [], "535.216.01") == []
    # the container toolkit is never the driver's
    dk = packaging.choose(NV, UBUNTU_DKMS_535)
    gone = packaging.leaving_packages(
        dk, dk, UBUNTU_DKMS_535, packaging.target_packages(dk, "550.90.07", "k"), "550.90.07"
    )
    assert "nvidia-container-toolkit" not in gone and "nvidia-dkms-535-server-open" in gone
    assert "nvidia-kernel-source-535-server-open" not in gone  # not a flavour package: apt decides


def test_a_flavour_change_removes_the_old_flavour():
    old = packaging.choose(NV, DEBIAN_TESLA_535)
    new = packaging.choose(NV, DEBIAN_TESLA_535, "debian")
    target = packaging.target_packages(new, "550.163.01", "6.12.57+deb13-amd64")
    assert packaging.leaving_packages(old, new, DEBIAN_TESLA_535, target, "550.163.01") == [
        "firmware-nvidia-tesla-535-gsp",
        "libnvidia-tesla-535-ml1",
        "nvidia-tesla-535-kernel-dkms",
        "nvidia-tesla-535-smi",
    ]
    assert packaging.leaving_packages(None, new, DEBIAN_TESLA_535, target, "550.163.01") == []


def test_dkms_needs_the_build_tree_of_both_kernels():
    fl = packaging.choose(NV, UBUNTU_DKMS_535)
    res = packaging.buildability(
        fl,
        ["5.15.0-119-generic", "5.15.0-121-generic"],
        {"5.15.0-119-generic": True, "5.15.0-121-generic": False},
        ["linux-headers-5.15.0-119-generic"],
        "disabled",
    )
    assert res["problems"] == [
        "kernel 5.15.0-121-generic has no build tree for DKMS (/lib/modules/5.15.0-121-generic/build):"
        " install linux-headers-5.15.0-121-generic"
    ]
    assert res["kernels"]["5.15.0-119-generic"] == {
        "build_dir": True,
        "headers_package": "linux-headers-5.15.0-119-generic",
        "headers_installed": True,
    }
    # installed but the link is gone
    res = packaging.buildability(fl, ["k1"], {"k1": False}, ["linux-headers-k1"], "disabled")
    assert res["problems"][0].endswith("install linux-headers-k1 again (it is installed but the build link is missing)")
    # the same kernel twice is one check
    assert len(packaging.buildability(fl, ["k1", "k1"], {}, [], None)["problems"]) == 1


def test_precompiled_needs_no_headers_and_no_key():
    fl = packaging.choose(NV, UBUNTU_PRECOMPILED_535)
    assert packaging.buildability(fl, ["k"], {"k": False}, [], "enabled")["problems"] == []


def test_secure_boot_refuses_an_unsigned_or_unenrolled_dkms_build():
    fl = packaging.choose(NV, DEBIAN_535)
    ok = {"k": True}
    none = packaging.buildability(fl, ["k"], ok, [], "enabled", {"key": None, "enrolled": None})
    assert "DKMS has no signing key (/var/lib/dkms/mok.pub, /var/lib/shim-signed/mok/MOK.der)" in none["problems"][0]
    out = packaging.buildability(fl, ["k"], ok, [], "enabled", {"key": "/var/lib/dkms/mok.pub", "enrolled": False})
    assert "/var/lib/dkms/mok.pub is not enrolled" in out["problems"][0]
    good = packaging.buildability(fl, ["k"], ok, [], "enabled", {"key": "/var/lib/dkms/mok.pub", "enrolled": True})
    assert good["problems"] == [] and good["signing"] == {"key": "/var/lib/dkms/mok.pub", "enrolled": True}
    # mokutil missing: recorded as unknown, not refused
    unk = packaging.buildability(fl, ["k"], ok, [], "enabled", {"key": "/var/lib/dkms/mok.pub", "enrolled": None})
    assert unk["problems"] == [] and unk["signing"]["enrolled"] is None
    assert packaging.buildability(fl, ["k"], ok, [], "disabled")["signing"] is None


@pytest.mark.parametrize(
    "text,want",
    [
        ("/var/lib/dkms/mok.pub is already enrolled\n", True),
        ("/var/lib/shim-signed/mok/MOK.der is not enrolled\n", False),
        ("EFI variables are not supported on this system\n", None),
    ],
)
def test_mokutil_test_key(text, want):
    assert packaging.parse_mokutil_test_key(text) is want


def test_fabric_manager_moves_with_the_driver_where_installed():
    host = UBUNTU_DKMS_535 + ["nvidia-fabricmanager-535", "libnvidia-nscq-535"]
    got = packaging.companions(NV, host, "550.127.05")
    assert [c["packages"] for c in got] == [["nvidia-fabricmanager-550", "libnvidia-nscq-550"]]
    assert got[0]["evidence"] == ["nvidia-fabricmanager-535"]
    assert packaging.companions(NV, UBUNTU_DKMS_535, "550.127.05") == []
    # the CUDA repository's branchless name stays branchless
    assert [c["packages"] for c in packaging.companions(NV, ["nvidia-fabricmanager", "cuda-drivers"], "580.95.05")] == [
        ["nvidia-fabricmanager", "libnvidia-nscq"]
    ]


def test_moving_from_precompiled_to_dkms_keeps_kernel_common():
    """nvidia-dkms-<b>-server Depends on nvidia-kernel-common-<b>-server: the DKMS set names it, so a
    same-branch move off precompiled modules removes only the per-kernel module packages."""
    old = packaging.choose(NV, UBUNTU_PRECOMPILED_535)
    new = packaging.choose(NV, UBUNTU_PRECOMPILED_535, "ubuntu-server-open")
    target = packaging.target_packages(new, "535.216.01", "5.15.0-119-generic")
    assert "nvidia-kernel-common-535-server" in target
    assert packaging.leaving_packages(old, new, UBUNTU_PRECOMPILED_535, target, "535.216.01") == [
        "linux-modules-nvidia-535-server-open-5.15.0-107-generic",
        "linux-modules-nvidia-535-server-open-5.15.0-119-generic",
    ]


def test_kernel_templates_match_kernel_releases_only():
    prop = {"name": "ubuntu-precompiled-server", "packages": ["linux-modules-nvidia-{branch}-server-{kernel}"]}
    host = [
        "linux-modules-nvidia-535-server-open-5.15.0-119-generic",
        "linux-modules-nvidia-535-server-generic",
        "linux-modules-nvidia-535-server-5.15.0-119-generic",
    ]
    assert packaging.leaving_packages(prop, prop, host, [], "550.127.05") == [
        "linux-modules-nvidia-535-server-5.15.0-119-generic"
    ]


def test_cuda_repo_names_the_whole_closure_and_moves_the_meta_as_a_companion():
    fl = packaging.choose(NV, CUDA_REPO_550)
    assert packaging.target_packages(fl, "580.126.09", "k") == [
        "nvidia-driver-580",
        "nvidia-dkms-580",
        "nvidia-kernel-common-580",
        "libnvidia-compute-580",
        "nvidia-utils-580",
        "nvidia-compute-utils-580",
    ]
    assert [c["packages"] for c in packaging.companions(NV, CUDA_REPO_550, "580.126.09")] == [["cuda-drivers-580"]]
    # and over the -server-open module, as NVIDIA's instructions leave it: the meta follows that driver
    server = ["cuda-drivers-550", "nvidia-driver-550-server-open", "nvidia-dkms-550-server-open"]
    assert packaging.choose(NV, server)["name"] == "ubuntu-server-open"
    assert [c["packages"] for c in packaging.companions(NV, server, "580.126.09")] == [["cuda-drivers-580"]]
    assert packaging.leaving_companions(
        packaging.companions(NV, server, "580.126.09"), server, ["cuda-drivers-580"], "580.126.09"
    ) == ["cuda-drivers-550"]


@pytest.mark.parametrize(
    "enrolled,new,test_key,want",
    [
        ("[key 1]\nSHA1 Fingerprint: ab:cd:ef:01\n", "", "x is already enrolled", True),
        (
            "[key 1]\nSHA1 Fingerprint: 99:99:99:99\n",
            "[key 1]\nSHA1 Fingerprint: ab:cd:ef:01\n",
            "/var/lib/dkms/mok.pub is already enrolled\n",
            "pending",
        ),
        ("", "", "/var/lib/dkms/mok.pub is not enrolled\n", False),
        # read, and not in it: old mokutil's "already enrolled" (db, dbx, MokListX) does not count
        (
            "[key 1]\nSHA1 Fingerprint: 99:99:99:99\n",
            "MokNew is empty\n",
            "/var/lib/dkms/mok.pub is already enrolled\n",
            False,
        ),
        ("MokListRT is empty\n", "", "x is already enrolled", False),
        ("", "", "", None),
    ],
)
def test_mok_enrolment_tells_pending_from_enrolled(enrolled, new, test_key, want):
    assert packaging.mok_enrolment("abcdef01", enrolled, new, test_key) == want


def test_a_pending_key_is_refused():
    fl = packaging.choose(NV, DEBIAN_535)
    res = packaging.buildability(
        fl, ["k"], {"k": True}, [], "enabled", {"key": "/var/lib/dkms/mok.pub", "enrolled": "pending"}
    )
    assert "only queued for enrolment (mokutil --list-new)" in res["problems"][0]
    assert res["signing_problems"] == res["problems"] and res["kernel_problems"] == {"k": []}


def test_detection_is_fnmatch_over_whole_names_case_sensitive_sorted_and_unique():
    installed = iter(
        [
            "nvidia-dkms-550",
            "cuda-drivers-550",
            "nvidia-dkms-550",
            "NVIDIA-DKMS-550",
            "xnvidia-dkms-550",
            "nvidia-dkms-5500",
            "nvidia-dkms-550-server-open",
        ]
    )
    # Ubuntu's own non-server names are the CUDA repository's up to 580: both flavours are there, the
    # CUDA repository's first (detection takes it)
    assert packaging.installed_flavours(NV, installed) == [
        {"name": "cuda-repo", "evidence": ["nvidia-dkms-550"]},
        {"name": "ubuntu", "evidence": ["nvidia-dkms-550"]},
        {"name": "ubuntu-server-open", "evidence": ["nvidia-dkms-550-server-open"]},
    ]
    assert packaging.installed_flavours(NV, ["dkms", "nvidia-dkms-550-server-openx"]) == []


def test_the_module_package_decides_the_cuda_flavour_not_the_meta():
    """NVIDIA's instructions install cuda-drivers-<branch> over the open module (its Depends accept the
    open, proprietary and -server drivers): the host keeps the module it has."""
    assert packaging.choose(NV, ["cuda-drivers-550", "nvidia-driver-550-open", "nvidia-dkms-550-open"])[
        "name"
    ] == "cuda-repo-open"
    assert packaging.choose(NV, ["cuda-drivers-550", "nvidia-driver-550", "nvidia-dkms-550"])["name"] == "cuda-repo"
    assert packaging.choose(
        NV, ["cuda-drivers-550", "nvidia-driver-550-server-open", "nvidia-dkms-550-server-open"]
    )["name"] == "ubuntu-server-open"


def test_detection_ignores_an_architecture_qualifier_as_match_families_does():
    """apt_state.in_families' rule (dpkg-query's ${binary:Package} form); the evidence keeps the name."""
    assert packaging.installed_flavours(NV, ["nvidia-dkms-550-server-open:amd64"]) == [
        {"name": "ubuntu-server-open", "evidence": ["nvidia-dkms-550-server-open:amd64"]}
    ]
    assert packaging.companions(NV, ["nvidia-fabricmanager:amd64"], "580.95.05") == [
        {
            "packages": ["nvidia-fabricmanager", "libnvidia-nscq"],
            "templates": ["nvidia-fabricmanager", "libnvidia-nscq"],
            "evidence": ["nvidia-fabricmanager:amd64"],
        }
    ]


def test_companion_groups_whole_shape():
    host = iter(
        ["nvidia-fabricmanager-535", "nvidia-fabricmanager", "libnvidia-nscq-535", "nvidia-fabricmanager-dev-535"]
    )
    assert packaging.companions(NV, host, "550.127.05") == [
        {
            "packages": ["nvidia-fabricmanager-550", "libnvidia-nscq-550"],
            "templates": ["nvidia-fabricmanager-{branch}", "libnvidia-nscq-{branch}"],
            "evidence": ["nvidia-fabricmanager-535"],
        },
        {
            "packages": ["nvidia-fabricmanager", "libnvidia-nscq"],
            "templates": ["nvidia-fabricmanager", "libnvidia-nscq"],
            "evidence": ["nvidia-fabricmanager"],
        },
    ]


def test_companion_templates_get_branch_and_version_but_not_the_kernel():
    p = resolve_profile(
        "nvidia",
        {
            "companion_packages": [
                {"detect": ["acme-fm*"], "packages": ["acme-fm-{version}", "acme-fm-{branch}-{kernel}"]}
            ]
        },
    )
    assert packaging.companions(p, ["acme-fm-1", "acme-fm"], "550.90.07") == [
        {
            "packages": ["acme-fm-550.90.07", "acme-fm-550-{kernel}"],
            "templates": ["acme-fm-{version}", "acme-fm-{branch}-{kernel}"],
            "evidence": ["acme-fm", "acme-fm-1"],
        }
    ]


def test_target_templates_fill_every_placeholder_occurrence():
    fl = {"packages": ["a-{branch}-{branch}", "b-{version}", "c-{kernel}-{branch}", "plain"]}
    assert packaging.target_packages(fl, "550.90.07", "6.8.0-45-generic") == [
        "a-550-550",
        "b-550.90.07",
        "c-6.8.0-45-generic-550",
        "plain",
    ]
    # a version without a dot is its own branch
    assert packaging.target_packages(fl, "580", "k") == ["a-580-580", "b-580", "c-k-580", "plain"]


def test_detect_defaults_to_the_templates_with_wildcards():
    p = resolve_profile(
        "nvidia",
        {
            "packages": ["nvidia-headless-{branch}-server", "acme-{version}-{kernel}", "plain"],
            "packaging": [
                {"name": "x", "build": "precompiled", "packages": ["x-mod-{branch}-{kernel}", "x-{version}"]}
            ],
            "packaging_default": "x",
        },
    )
    assert packaging.flavours(p) == [
        {
            "name": "packages",
            "build": "dkms",
            "packages": ["nvidia-headless-{branch}-server", "acme-{version}-{kernel}", "plain"],
            "detect": ["nvidia-headless-*-server", "acme-*-*", "plain"],
            "optional": [],
            "module_flavour": None,
        },
        {
            "name": "x",
            "build": "precompiled",
            "packages": ["x-mod-{branch}-{kernel}", "x-{version}"],
            "detect": ["x-mod-*-*", "x-*"],
            "optional": [],
            "module_flavour": None,
        },
    ]


def test_template_regexes_are_compiled_once_per_template():
    packaging._template_re.cache_clear()
    fl = packaging.choose(NV, UBUNTU_PRECOMPILED_535)
    first = packaging.leaving_packages(fl, fl, UBUNTU_PRECOMPILED_535, [], "550.127.05")
    assert packaging.leaving_packages(fl, fl, UBUNTU_PRECOMPILED_535, [], "550.127.05") == first
    info = packaging._template_re.cache_info()
    assert (info.misses, info.currsize) == (6, 6)  # the flavour's six templates
    assert packaging._template_re("a-{branch}") is packaging._template_re("a-{branch}")


LEAVING_FM = [
    # (host, version, target, leaving)
    (
        UBUNTU_DKMS_535 + ["nvidia-fabricmanager-535", "libnvidia-nscq-535"],
        "550.127.05",
        ["nvidia-driver-550-server-open", "nvidia-fabricmanager-550", "libnvidia-nscq-550"],
        ["libnvidia-nscq-535", "nvidia-fabricmanager-535"],
    ),
    # in-branch: nothing leaves
    (UBUNTU_DKMS_535 + ["nvidia-fabricmanager-535", "libnvidia-nscq-535"], "535.261.03", [], []),
    # the CUDA repository's branchless names: nothing leaves
    (["nvidia-fabricmanager", "libnvidia-nscq", "cuda-drivers"], "580.95.05", ["nvidia-fabricmanager"], []),
    # both groups; another package that only starts like one stays
    (
        [
            "nvidia-fabricmanager-535",
            "libnvidia-nscq-570",
            "nvidia-fabricmanager",
            "libnvidia-nscq",
            "nvidia-fabricmanager-dev-535",
        ],
        "580.95.05",
        ["nvidia-fabricmanager-580", "libnvidia-nscq-580", "nvidia-fabricmanager", "libnvidia-nscq"],
        ["libnvidia-nscq-570", "nvidia-fabricmanager-535"],
    ),
    # without a fabric manager there are no companions
    (UBUNTU_DKMS_535 + ["libnvidia-nscq-535"], "550.127.05", [], []),
]


@pytest.mark.parametrize("host,version,target,want", LEAVING_FM)
def test_old_branch_companions_leave(host, version, target, want):
    groups = packaging.companions(NV, host, version)
    assert packaging.leaving_companions(groups, host, target, version) == want


@pytest.mark.parametrize("host,version,target,want", LEAVING_FM)
def test_leaving_companions_is_what_driver_facts_computed_with_flavour_dicts(host, version, target, want):
    """npu_driver_facts' former companion removals: leaving_packages per group with stand-in flavours."""
    groups = packaging.companions(NV, host, version)
    old_way = []
    for c in groups:
        old_way += packaging.leaving_packages(
            {"name": "companion", "packages": c["templates"]}, {"name": "companion"}, host, target, version
        )
    assert sorted(set(old_way)) == packaging.leaving_companions(groups, host, target, version) == want


def test_a_companion_in_the_target_does_not_leave():
    groups = [{"packages": ["libnvidia-nscq-550"], "templates": ["libnvidia-nscq-{branch}"], "evidence": []}]
    assert packaging.leaving_companions(groups, ["libnvidia-nscq-535"], ["libnvidia-nscq-535"], "550.1") == []
    assert packaging.leaving_companions(groups, ["libnvidia-nscq-535"], [], "550.1") == ["libnvidia-nscq-535"]
    assert packaging.leaving_companions([], ["libnvidia-nscq-535"], [], "550.1") == []


def test_build_kinds_have_one_definition():
    assert vendor_profiles.BUILDS == ("dkms", "precompiled")
    assert packaging.BUILDS is vendor_profiles.BUILDS
    with pytest.raises(ProfileError) as exc:
        resolve_profile(
            "nvidia", {"packaging": [{"name": "x", "build": "rpm", "packages": ["a"]}], "packaging_default": "x"}
        )
    assert (
        str(exc.value) == "vendor profile 'nvidia': packaging flavour 'x': build must be dkms or precompiled, got 'rpm'"
    )
    for build in ("dkms", "precompiled"):
        p = resolve_profile(
            "nvidia", {"packaging": [{"name": "x", "build": build, "packages": ["a"]}], "packaging_default": "x"}
        )
        assert p["packaging"][0]["build"] == build


def test_vendor_profiles_does_not_import_host_helpers():
    """host/packaging imports vendor_profiles (BUILDS): the other way round would be a cycle."""
    tree = ast.parse(inspect.getsource(vendor_profiles))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m and ("module_utils.host" in m or "packaging" in m)] == []


# tests/lab/realpkg mirror: what apt installs for nvidia-tesla-470-kernel-dkms, -smi, libnvidia-tesla-470-ml1,
# libnvidia-tesla-470-cfg1 and nvidia-persistenced (bookworm, 470.256.02-1~deb12u1)
DEBIAN_TESLA_470 = [
    "nvidia-tesla-470-kernel-dkms",
    "nvidia-tesla-470-smi",
    "libnvidia-tesla-470-ml1",
    "libnvidia-tesla-470-cfg1",
    "nvidia-tesla-470-alternative",
    "nvidia-tesla-470-kernel-support",
    "nvidia-persistenced",
    "nvidia-kernel-common",
    "nvidia-modprobe",
    "nvidia-installer-cleanup",
    "glx-alternative-nvidia",
]
TESLA_535_TARGET = [
    "nvidia-tesla-535-kernel-dkms",
    "nvidia-tesla-535-smi",
    "libnvidia-tesla-535-ml1",
    "firmware-nvidia-tesla-535-gsp",
]


def _flavour(name):
    return next(fl for fl in packaging.flavours(NV) if fl["name"] == name)


def test_a_tesla_branch_change_moves_the_branchs_other_packages():
    old = _flavour("debian-tesla")
    got = packaging.branch_counterparts(
        old, old, NV["package_families"], DEBIAN_TESLA_470, TESLA_535_TARGET, "535.216.03",
        packaging.rule_templates(NV),
    )
    assert got == {
        "libnvidia-tesla-470-cfg1": "libnvidia-tesla-535-cfg1",
        "nvidia-tesla-470-alternative": "nvidia-tesla-535-alternative",
        "nvidia-tesla-470-kernel-support": "nvidia-tesla-535-kernel-support",
    }


def test_counterparts_only_on_a_branch_change_within_a_branch_named_flavour():
    families = NV["package_families"]
    tesla, current = _flavour("debian-tesla"), _flavour("debian")
    # in-branch: nothing
    assert packaging.branch_counterparts(tesla, tesla, families, DEBIAN_TESLA_470, [], "470.256.02") == {}
    # Debian's current branch names no branch
    assert packaging.branch_counterparts(current, current, families, DEBIAN_535, [], "550.163.01") == {}
    assert packaging.branch_counterparts(None, tesla, families, DEBIAN_TESLA_470, [], "535.216.03") == {}
    # a flavour change (Tesla 470 -> Debian's current 535): nothing is renamed into the flavour being left
    target = ["nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "firmware-nvidia-gsp"]
    assert packaging.branch_counterparts(tesla, current, families, DEBIAN_TESLA_470, target, "535.216.03") == {}


def test_counterparts_leave_the_flavours_own_and_companion_packages_to_their_rules():
    host = UBUNTU_PRECOMPILED_535 + [
        "nvidia-fabricmanager-535", "libnvidia-nscq-535", "libnvidia-gl-535-server",
        "nvidia-firmware-535-server-535.183.01", "nvidia-container-toolkit",
        # another flavour's package on the same host (a DKMS leftover): its flavour's rules, not a rename
        "nvidia-dkms-535-server",
        # the kernel-flavour meta: renamed, but apt offers it at a kernel's version, never the driver's
        "linux-modules-nvidia-535-server-open-generic",
    ]
    target = ["linux-modules-nvidia-550-server-open-5.15.0-119-generic", "nvidia-kernel-common-550-server",
              "libnvidia-compute-550-server", "libnvidia-common-550-server", "nvidia-utils-550-server",
              "nvidia-compute-utils-550-server"]
    fl = _flavour("ubuntu-precompiled-server-open")
    got = packaging.branch_counterparts(fl, fl, NV["package_families"], host, target, "550.127.05",
                                        packaging.rule_templates(NV))
    # a word 535 only: the firmware package's version part stays (apt offers no such name: it stays)
    assert got == {
        "libnvidia-gl-535-server": "libnvidia-gl-550-server",
        "linux-modules-nvidia-535-server-open-generic": "linux-modules-nvidia-550-server-open-generic",
        "nvidia-firmware-535-server-535.183.01": "nvidia-firmware-550-server-535.183.01",
    }


def test_tesla_gsp_firmware_is_optional_and_still_leaves_on_a_flavour_change():
    tesla = _flavour("debian-tesla")
    assert packaging.target_packages(tesla, "470.256.02", "6.1.0-50-amd64") == [
        "nvidia-tesla-470-kernel-dkms", "nvidia-tesla-470-smi", "libnvidia-tesla-470-ml1"]
    # Tesla 470 has no such package (nvidia-tesla-470-kernel-support provides the name); 535 has one
    assert packaging.optional_packages(tesla, "470.256.02", "k") == ["firmware-nvidia-tesla-470-gsp"]
    assert packaging.optional_packages(_flavour("debian"), "535.261.03", "k") == []
    # a branch change within Tesla: the old branch's firmware package leaves by the flavour's rule
    gone = packaging.leaving_packages(tesla, tesla, DEBIAN_TESLA_535, [], "550.163.01")
    assert "firmware-nvidia-tesla-535-gsp" in gone, gone


@pytest.mark.parametrize("bad", ["firmware-x", [""], [1], None, ["x-mod-{branch}-{kernel}"]])
def test_a_flavours_optional_must_be_a_list_of_templates(bad):
    with pytest.raises(ProfileError, match="optional must be a list of package templates"):
        resolve_profile("nvidia", {"packaging": [
            {"name": "x", "build": "dkms", "packages": ["x-{branch}"], "optional": bad}], "packaging_default": "x"})


def test_the_other_module_flavours_are_named_same_build_first():
    nv = resolve_profile("nvidia")
    by = {f["name"]: f for f in packaging.flavours(nv)}
    assert packaging.other_module_flavours(nv, by["ubuntu-server-open"]) == [
        "ubuntu-server", "cuda-repo", "ubuntu-precompiled-server"]
    assert packaging.other_module_flavours(nv, by["debian"]) == ["debian-open", "cuda-repo-open"]
    assert packaging.other_module_flavours(nv, by["cuda-repo"]) == [
        "cuda-repo-open", "ubuntu-server-open", "debian-open", "ubuntu-precompiled-server-open"]
    assert packaging.other_module_flavours(nv, by["ubuntu-precompiled-server"])[0] == "ubuntu-precompiled-server-open"
    assert packaging.other_module_flavours(nv, {"name": "packages", "build": "dkms", "module_flavour": None}) == []
    with pytest.raises(ProfileError, match="module_flavour must be open or proprietary"):
        resolve_profile("nvidia", {"packaging": [
            {"name": "x", "build": "dkms", "packages": ["x"], "module_flavour": "closed"}]})


# A host on NVIDIA's CUDA repository at 580 (branch-suffixed names), open modules, NVSwitch, a desktop
# library the flavour does not name, and an exact-version pinning package; README "Ubuntu 590 package
# renames" of NVIDIA's driver installation guide for the names the 590 release carries
CUDA_OPEN_580 = {
    "nvidia-open-580": "580.95.05-1",
    "nvidia-driver-580-open": "580.95.05-0ubuntu1",
    "nvidia-dkms-580-open": "580.95.05-0ubuntu1",
    "nvidia-kernel-common-580": "580.95.05-0ubuntu1",
    "libnvidia-compute-580": "580.95.05-0ubuntu1",
    "libnvidia-gl-580": "580.95.05-0ubuntu1",
    "nvidia-utils-580": "580.95.05-0ubuntu1",
    "nvidia-compute-utils-580": "580.95.05-0ubuntu1",
    "nvidia-fabricmanager-580": "580.95.05-1",
    "libnvidia-nscq-580": "580.95.05-1",
    "nvidia-driver-pinning-580.95.05": "580.95.05-1",
    "nvidia-container-toolkit": "1.17.8-1",
}


def test_cuda_repository_names_lose_the_branch_from_590_read_from_the_version():
    fl = packaging.choose(NV, list(CUDA_OPEN_580))
    assert fl["name"] == "cuda-repo-open"
    assert [packaging.branchless(fl, v) for v in ("580.126.09", "590.48.01", "610.43.02")] == [False, True, True]
    assert packaging.target_packages(fl, "590.48.01", "6.8.0-45-generic") == [
        "nvidia-driver-open", "nvidia-dkms-open", "nvidia-kernel-common", "libnvidia-compute", "nvidia-utils",
        "nvidia-compute-utils",
    ]
    assert packaging.target_packages(fl, "580.126.09", "6.8.0-45-generic")[:2] == [
        "nvidia-driver-580-open", "nvidia-dkms-580-open"]
    assert packaging.pinning_package(fl, "590.48.01") == "nvidia-driver-pinning-590.48.01"
    assert packaging.pinning_package(fl, "580.126.09") is None
    # Ubuntu's own non-server packages keep the branch from 590 (nvidia-dkms-590-open): chosen by name
    ub = packaging.choose(NV, list(CUDA_OPEN_580), "ubuntu-open")
    assert packaging.target_packages(ub, "590.48.01", "k")[:2] == ["nvidia-driver-590-open", "nvidia-dkms-590-open"]
    assert packaging.pinning_package(ub, "590.48.01") is None
    # other flavours keep their branch whatever the version (Ubuntu's archive names 590 as 590)
    srv = packaging.choose(NV, UBUNTU_DKMS_535)
    assert packaging.target_packages(srv, "590.48.01", "k")[0] == "nvidia-driver-590-server-open"
    assert packaging.pinning_package(srv, "590.48.01") is None


def test_a_move_onto_the_branchless_names_is_one_transaction():
    installed = list(CUDA_OPEN_580)
    fl = packaging.choose(NV, installed)
    v = "590.48.01"
    comp = packaging.companions(NV, installed, v, branchless_names=True)
    assert [c["packages"] for c in comp] == [["nvidia-fabricmanager", "libnvidia-nscq"], ["nvidia-open"]]
    target = packaging.target_packages(fl, v, "k") + ["nvidia-fabricmanager", "libnvidia-nscq", "nvidia-open"]
    assert packaging.leaving_packages(fl, fl, installed, target, v) == [
        "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-dkms-580-open", "nvidia-driver-580-open",
        "nvidia-kernel-common-580", "nvidia-utils-580",
    ]
    assert packaging.leaving_companions(comp, installed, target, v) == [
        "libnvidia-nscq-580", "nvidia-fabricmanager-580", "nvidia-open-580"]
    assert packaging.leaving_pins(fl, installed, v) == ["nvidia-driver-pinning-580.95.05"]
    # the desktop library the flavour does not name follows under its new name
    # (a name that also carries the version has no known branchless name: left to apt)
    assert packaging.branch_counterparts(
        fl, fl, NV["package_families"], installed + ["nvidia-firmware-580-580.95.05"], target, v,
        skip_templates=packaging.rule_templates(NV)
    ) == {"libnvidia-gl-580": "libnvidia-gl"}
    # the metas at the old branch stay suffixed; below 590 the branchless metas are apt's
    assert [c["packages"] for c in packaging.companions(NV, installed, "580.126.09")] == [
        ["nvidia-fabricmanager-580", "libnvidia-nscq-580"], ["nvidia-open-580"]]
    assert packaging.companions(NV, ["cuda-drivers"], "580.126.09") == []
    # the branchless metas belong to the CUDA repository's flavours: a leftover cuda-drivers beside
    # Ubuntu's -server packages is not made a 590 companion
    assert packaging.companions(NV, ["cuda-drivers"] + UBUNTU_DKMS_535, "590.48.01") == []
    assert [c["packages"] for c in packaging.companions(NV, ["cuda-drivers"], "590.48.01", branchless_names=True)] == [
        ["cuda-drivers"]]


def test_a_point_release_on_the_branchless_names_moves_every_driver_package_and_replaces_the_pin():
    installed = {
        "nvidia-open": "590.44.01-1", "nvidia-driver-open": "590.44.01-0ubuntu1",
        "nvidia-dkms-open": "590.44.01-0ubuntu1", "libnvidia-gl": "590.44.01-0ubuntu1",
        "nvidia-modprobe": "590.44.01-1", "libnvidia-decode": "590.48.01-0ubuntu1",
        "nvidia-container-toolkit": "1.17.8-1", "cuda-toolkit-13-1": "13.1.0-1",
        # one pin at a time on a real host; both here to show each leaves
        "nvidia-driver-pinning-590": "590-1ubuntu1", "nvidia-driver-pinning-590.44.01": "590.44.01-1",
    }
    fl = packaging.choose(NV, list(installed))
    assert fl["name"] == "cuda-repo-open"
    v = "590.48.01"
    target = packaging.target_packages(fl, v, "k") + ["nvidia-open"]
    assert packaging.leaving_packages(fl, fl, list(installed), target, v) == []
    # pinning packages conflict with each other: every one but the target's leaves, a branch pin too
    leaving = packaging.leaving_pins(fl, list(installed), v)
    assert leaving == ["nvidia-driver-pinning-590", "nvidia-driver-pinning-590.44.01"]
    assert packaging.leaving_pins(fl, list(installed) + ["nvidia-driver-pinning-590.48.01"], v) == leaving
    # below 590 the target has no pin of its own and installed ones stay (the window names exact versions)
    assert packaging.leaving_pins(fl, ["nvidia-driver-pinning-580.95.05"], "580.126.09") == []
    assert packaging.branchless_others(fl, NV["package_families"], installed, target + leaving, v) == [
        "libnvidia-gl", "nvidia-modprobe"]
    # not where the target keeps the branch in its names
    assert packaging.branchless_others(fl, NV["package_families"], installed, target, "580.126.09") == []


@pytest.mark.parametrize("version, carried", [
    ("590.48.01-0ubuntu1", "590.48.01"), ("1:590.48.01-1", "590.48.01"), ("610.43.02", "610.43.02"),
    ("550.90.07-0ubuntu0.22.04.1", "550.90.07"), ("610-2ubuntu1", None), ("13.3.1-1", None), ("1.17.8-1", None),
    ("5.15.0-119.129+1", None), (None, None),
])
def test_driver_versions_are_told_from_other_versions(version, carried):
    assert packaging.driver_versioned(version) == carried


def test_off_target_names_what_apt_would_take_from_another_branch():
    rows = [
        {"name": "nvidia-dkms-open", "to": "590.48.01-0ubuntu1"},
        {"name": "nvidia-modprobe", "to": "610.43.02-1"},
        {"name": "libnvidia-gl:i386", "to": "610.43.02-0ubuntu1"},
        {"name": "cuda-toolkit-13-3", "to": "13.3.1-1"},
        {"name": "dkms", "to": "3.0.10-8"},
        {"name": "nvidia-driver-pinning-610", "to": "610-2ubuntu1"},
    ]
    assert packaging.off_target(rows, NV["package_families"], "590.48.01") == [
        {"name": "nvidia-modprobe", "to": "610.43.02-1"}, {"name": "libnvidia-gl", "to": "610.43.02-0ubuntu1"}]


@pytest.mark.parametrize("key, value, words", [
    ("branchless_from", "590", "branchless_from must be a branch number"),
    ("branchless_from", True, "branchless_from must be a branch number"),
    ("pinning", "nvidia-driver-pinning", "pinning must be a package template with one of {version} or {branch}"),
    ("pinning", "p-{branch}-{version}", "pinning must be a package template with one of {version} or {branch}"),
])
def test_bad_branchless_keys_are_refused_naming_the_flavour(key, value, words):
    flavour = {"name": "x", "build": "dkms", "packages": ["x-{branch}"], key: value}
    with pytest.raises(ProfileError, match="packaging flavour 'x': " + words.replace("{", r"\{").replace("}", r"\}")):
        resolve_profile("nvidia", overrides={"packaging": [flavour], "packaging_default": None})


def test_holds_exclusions_and_the_drift_check_cover_the_branchless_names():
    """The holds, the unattended-upgrades blacklist and the drift monitor's package_held/packages_unheld all
    take the driver's packages from the profile's package_families: every name NVIDIA's 590 release carries
    (the driver installation guide's rename table) and the pinning package must be in them."""
    from ansible_collections.npuops.fleet.plugins.module_utils.host import apt_state

    names = ["cuda-drivers", "nvidia-open", "nvidia-driver-open", "nvidia-driver", "nvidia-dkms-open", "nvidia-dkms",
             "nvidia-kernel-common", "libnvidia-compute", "libnvidia-common", "libnvidia-gl", "libnvidia-cfg1",
             "libnvidia-decode", "libnvidia-encode", "libnvidia-extra", "libnvidia-fbc1", "libnvidia-gpucomp",
             "nvidia-utils", "nvidia-compute-utils", "nvidia-fabricmanager", "libnvidia-nscq", "nvidia-modprobe",
             "nvidia-driver-pinning-590.48.01", "nvidia-driver-pinning-590"]
    assert apt_state.match_families(names, NV["package_families"]) == sorted(names)
    blacklist = [apt_state.family_to_blacklist(f) for f in NV["package_families"]]
    assert [n for n in names if not apt_state.blacklisted(n, blacklist)] == []
