# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Vendor profiles: everything vendor-specific is data here, not branches in code.

``nvidia`` and ``rebellions`` are built in. ``resolve_profile(vendor, overrides, extra_vendors)``
returns a merged copy (overrides are merged per key, dicts one level deep) and raises
:class:`ProfileError` naming the vendor and key for an unknown vendor, an unknown key or a value of
the wrong type. Label keys follow NVIDIA's GPU Operator / GFD and Rebellions' NPU operator.
Host-side keys (kernel_modules, main_module, packaging, packages, userspace_package, services,
smi_command, device_glob) are the only definition of that data too: roles read it from npu_driver_facts' ``profile``.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

# Ubuntu's packaging of the driver under its non-server names, as NVIDIA's CUDA repository (up to 580) and
# Ubuntu's own archive name it: what the driver meta and the DKMS package need beside them, at one version.
_UBUNTU_CLOSURE = [
    "nvidia-kernel-common-{branch}",
    "libnvidia-compute-{branch}",
    "nvidia-utils-{branch}",
    "nvidia-compute-utils-{branch}",
]

# How a packaging flavour gets its kernel module (``build``; module_utils/host/packaging.py): DKMS builds
# it on the host, or a package ships it prebuilt. The one definition: host/packaging imports it (this
# module must not import host/packaging, which imports this one).
BUILDS = ("dkms", "precompiled")
# Which kernel modules a flavour installs: NVIDIA's open ones or its proprietary ones (host/gpu_support.py).
MODULE_FLAVOURS = ("open", "proprietary")

# Upgrade states: the GPU Operator's names plus the NPU operator's reboot states.
UPGRADE_STATES = (
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "reboot-required",
    "reboot-validation-required",
    "validation-required",
    "uncordon-required",
    "upgrade-done",
    "upgrade-failed",
)

BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "nvidia": {
        "display_name": "NVIDIA GPU",
        "presence_label": "nvidia.com/gpu.present",
        # GFD labels; the newer driver-version.* set is read when the cuda.driver.* set is absent.
        "driver_version_labels": {
            "major": "nvidia.com/cuda.driver.major",
            "minor": "nvidia.com/cuda.driver.minor",
            "rev": "nvidia.com/cuda.driver.rev",
        },
        "driver_version_labels_alt": {
            "major": "nvidia.com/cuda.driver-version.major",
            "minor": "nvidia.com/cuda.driver-version.minor",
            "rev": "nvidia.com/cuda.driver-version.revision",
            "full": "nvidia.com/cuda.driver-version.full",
        },
        "upgrade_state_label": "nvidia.com/gpu-driver-upgrade-state",
        "upgrade_skip_label": "nvidia.com/gpu-driver-upgrade.skip",
        "drain_skip_label": "nvidia.com/gpu-driver-upgrade-drain.skip",
        "deploy_skip_label": "nvidia.com/gpu.deploy.operands",
        "annotation_prefix": "nvidia.com/gpu-driver-upgrade",
        "deploy_label_prefix": "nvidia.com/gpu.deploy.",
        # Operand chain order: driver -> toolkit -> device plugin -> discovery -> validator.
        "operands": [
            "driver",
            "container-toolkit",
            "device-plugin",
            "gpu-feature-discovery",
            "dcgm",
            "dcgm-exporter",
            "mig-manager",
            "operator-validator",
        ],
        "validator_operand": "operator-validator",
        "resource_prefixes": ["nvidia.com/gpu", "nvidia.com/mig-"],
        # Other ways a pod gets the device (eviction_rules.accelerator_rule): a ResourceClaim allocated
        # by one of these DRA drivers (NVIDIA's k8s-dra-driver-gpu: GPUs and MIG devices, and the IMEX
        # channels of ComputeDomains), a hostPath under these device-node paths, or one of these runtime
        # classes with the visible-devices variable set in a container's env (agents that see every GPU).
        "dra_drivers": ["gpu.nvidia.com", "compute-domain.nvidia.com"],
        "device_node_prefixes": ["/dev/nvidia"],
        "runtime_class_names": ["nvidia", "nvidia-cdi", "nvidia-legacy"],
        "visible_devices_env": "NVIDIA_VISIBLE_DEVICES",
        # Which module flavour drives which GPU (module_utils/host/gpu_support.py): the driver's own
        # table, found in the target's packages by these globs (members of the .deb's data, without the
        # leading ./). NVIDIA's .run installs it as doc/NVIDIA_GLX-1.0/supported-gpus/supported-gpus.json;
        # packagers put it under their package's doc or share directory.
        "supported_gpus_files": [
            "usr/share/doc/*/supported-gpus.json",
            "usr/share/doc/*/supported-gpus/supported-gpus.json",
            "usr/share/nvidia/supported-gpus.json",
            "usr/share/nvidia/supported-gpus/supported-gpus.json",
        ],
        # the packages of the target set searched for it (small ones: the libraries and the firmware are
        # never read). Ubuntu ships it in nvidia-driver-<branch>[-server] (ubuntu-drivers-common's
        # gpu-manager reads /usr/share/doc/nvidia-driver-<branch>[-server]/supported-gpus.json); a flavour
        # whose set has none of these (the precompiled ones) is reported as not checked.
        # (the CUDA repository's 590+ names carry no branch: nvidia-driver, nvidia-kernel-common)
        "supported_gpus_packages": [
            "nvidia-driver-*", "nvidia-driver", "nvidia-kernel-common-*", "nvidia-kernel-common",
            "libnvidia-common-*", "libnvidia-common",
        ],
        "pci_vendor_id": "0x10de",
        # The DRA driver's kubelet plugin pods (a DaemonSet holding the driver): paused like an operand,
        # which needs a deploy label in its nodeSelector (operands.unpausable_dra_plugins).
        "dra_kubelet_plugin_selector": "nvidia-dra-driver-gpu-component=kubelet-plugin",
        # Unload order (dependents first); load is the reverse. main_module: the one whose version is read.
        "kernel_modules": ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"],
        "main_module": "nvidia",
        "device_glob": "/dev/nvidia[0-9]*",
        "smi_command": "nvidia-smi",
        "services": ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm"],
        # How the driver is packaged (module_utils/host/packaging.py): detected per host from what is
        # installed, first match in this order; {branch} = 550, {version} = 550.90.07, {kernel} = the
        # kernel that will run the module. Names and relationships as the archives publish them.
        "packaging": [
            # NVIDIA's CUDA repository (and Ubuntu's own non-server packages, the same names): the metas
            # (cuda-drivers-<branch>, nvidia-open-<branch>) depend with >=, so the whole closure is named
            # to pin it at the target, and they move as companions where installed
            {
                "name": "cuda-repo-open",
                "module_flavour": "open",
                "build": "dkms",
                "packages": ["nvidia-driver-{branch}-open", "nvidia-dkms-{branch}-open"] + _UBUNTU_CLOSURE,
                # the module package decides open vs proprietary: NVIDIA's own instructions install
                # cuda-drivers-<branch> with the open module, and the metas accept either
                "detect": ["nvidia-open-[0-9]*", "nvidia-open", "nvidia-dkms-[0-9][0-9][0-9]-open", "nvidia-dkms-open"],
                # from 590 the repository's names carry no branch (nvidia-dkms-open, libnvidia-compute,
                # cuda-drivers) and apt takes the newest branch unless a pinning package's preferences
                # file holds it: the target's own joins the transaction
                "branchless_from": 590,
                "pinning": "nvidia-driver-pinning-{version}",
            },
            {
                "name": "cuda-repo",
                "module_flavour": "proprietary",
                "build": "dkms",
                "packages": ["nvidia-driver-{branch}", "nvidia-dkms-{branch}"] + _UBUNTU_CLOSURE,
                # not cuda-drivers-<branch>: it is installed over the open and the -server modules too
                "detect": ["nvidia-dkms-[0-9][0-9][0-9]", "nvidia-dkms"],
                "branchless_from": 590,
                "pinning": "nvidia-driver-pinning-{version}",
            },
            # Ubuntu's own non-server packages: the CUDA repository's names up to 580 (so a host is detected
            # as cuda-repo*), but Canonical keeps the branch in them from 590 on (nvidia-dkms-590-open):
            # chosen by name (driver_upgrade_packaging), never detected before the CUDA repository's
            {
                "name": "ubuntu-open",
                "module_flavour": "open",
                "build": "dkms",
                "packages": ["nvidia-driver-{branch}-open", "nvidia-dkms-{branch}-open"] + _UBUNTU_CLOSURE,
                "detect": ["nvidia-dkms-[0-9][0-9][0-9]-open"],
            },
            {
                "name": "ubuntu",
                "module_flavour": "proprietary",
                "build": "dkms",
                "packages": ["nvidia-driver-{branch}", "nvidia-dkms-{branch}"] + _UBUNTU_CLOSURE,
                "detect": ["nvidia-dkms-[0-9][0-9][0-9]"],
            },
            # Ubuntu: precompiled modules signed by Canonical, one package per kernel
            {
                "name": "ubuntu-precompiled-server-open",
                "module_flavour": "open",
                "build": "precompiled",
                "packages": [
                    "linux-modules-nvidia-{branch}-server-open-{kernel}",
                    "nvidia-kernel-common-{branch}-server",
                    "libnvidia-compute-{branch}-server",
                    "libnvidia-common-{branch}-server",
                    "nvidia-utils-{branch}-server",
                    "nvidia-compute-utils-{branch}-server",
                ],
                "detect": ["linux-modules-nvidia-*-server-open-*"],
            },
            {
                "name": "ubuntu-precompiled-server",
                "module_flavour": "proprietary",
                "build": "precompiled",
                "packages": [
                    "linux-modules-nvidia-{branch}-server-{kernel}",
                    "nvidia-kernel-common-{branch}-server",
                    "libnvidia-compute-{branch}-server",
                    "libnvidia-common-{branch}-server",
                    "nvidia-utils-{branch}-server",
                    "nvidia-compute-utils-{branch}-server",
                ],
                "detect": ["linux-modules-nvidia-*-server-[0-9]*"],
            },
            # Ubuntu: DKMS
            {
                "name": "ubuntu-server-open",
                "module_flavour": "open",
                "build": "dkms",
                "packages": [
                    "nvidia-driver-{branch}-server-open",
                    "nvidia-dkms-{branch}-server-open",
                    "nvidia-kernel-common-{branch}-server",
                    "libnvidia-compute-{branch}-server",
                    "libnvidia-common-{branch}-server",
                    "nvidia-utils-{branch}-server",
                    "nvidia-compute-utils-{branch}-server",
                ],
                "detect": ["nvidia-dkms-*-server-open"],
            },
            {
                "name": "ubuntu-server",
                "module_flavour": "proprietary",
                "build": "dkms",
                "packages": [
                    "nvidia-driver-{branch}-server",
                    "nvidia-dkms-{branch}-server",
                    "nvidia-kernel-common-{branch}-server",
                    "libnvidia-compute-{branch}-server",
                    "libnvidia-common-{branch}-server",
                    "nvidia-utils-{branch}-server",
                    "nvidia-compute-utils-{branch}-server",
                ],
                "detect": ["nvidia-dkms-*-server"],
            },
            # Debian's archive (non-free): the release's current branch, its open flavour, Tesla branches
            {
                "name": "debian-tesla",
                "module_flavour": "proprietary",
                "build": "dkms",
                "packages": [
                    "nvidia-tesla-{branch}-kernel-dkms",
                    "nvidia-tesla-{branch}-smi",
                    "libnvidia-tesla-{branch}-ml1",
                ],
                # GSP firmware is a package from 510 on; for Tesla 470 nvidia-tesla-470-kernel-support
                # provides the name (the module package depends on either, at the exact version)
                "optional": ["firmware-nvidia-tesla-{branch}-gsp"],
                "detect": ["nvidia-tesla-*-kernel-dkms"],
            },
            {
                "name": "debian-open",
                "module_flavour": "open",
                "build": "dkms",
                "packages": ["nvidia-open-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "firmware-nvidia-gsp"],
                "detect": ["nvidia-open-kernel-dkms"],
            },
            {
                "name": "debian",
                "module_flavour": "proprietary",
                "build": "dkms",
                "packages": ["nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "firmware-nvidia-gsp"],
                "detect": ["nvidia-kernel-dkms"],
            },
        ],
        # a host with no driver package installed
        "packaging_default": "ubuntu-server-open",
        # moved with the driver, at exactly its version, where installed: the fabric manager (NVSwitch
        # systems) and its NSCQ library; the CUDA repository's newer releases drop the branch from the name
        "companion_packages": [
            {
                "detect": ["nvidia-fabricmanager-[0-9]*"],
                "packages": ["nvidia-fabricmanager-{branch}", "libnvidia-nscq-{branch}"],
            },
            {"detect": ["nvidia-fabricmanager"], "packages": ["nvidia-fabricmanager", "libnvidia-nscq"]},
            # the CUDA repository's metas: NVIDIA installs cuda-drivers-<branch> over any of the four
            # Ubuntu-named drivers (open, proprietary, -server), so it follows the driver, whatever flavour
            {"detect": ["cuda-drivers-[0-9]*"], "packages": ["cuda-drivers-{branch}"]},
            {"detect": ["nvidia-open-[0-9]*"], "packages": ["nvidia-open-{branch}"]},
            # from 590 the metas themselves carry no branch (before, cuda-drivers pointed at the newest
            # cuda-drivers-<branch> and is left to apt)
            {"detect": ["cuda-drivers"], "packages": ["cuda-drivers"], "since_branch": 590},
            {"detect": ["nvidia-open"], "packages": ["nvidia-open"], "since_branch": 590},
        ],
        # The package that carries the userspace driver library.
        "userspace_package": "libnvidia-compute-{branch}-server",
        "package_families": [
            "nvidia-*",
            "libnvidia-*",
            "cuda-*",
            "xserver-xorg-video-nvidia-*",
            "linux-modules-nvidia-*",
            # Debian's GSP firmware, pinned by the kernel module package at the driver's exact version
            "firmware-nvidia-*",
        ],
        "package_version_suffix": "-0ubuntu1",
        "image": "nvcr.io/nvidia/driver",
        "tag_format": "{branch}-{kernel}-{os_tag}",
        "regular_tag_format": "{version}-{os_tag}",
        "tag_uses_branch": True,
    },
    "rebellions": {
        "display_name": "Rebellions NPU",
        "presence_label": "rebellions.ai/npu.present",
        # RBLN NPU Feature Discovery's keys; the split set is read when .full is absent.
        "driver_version_labels": {"full": "rebellions.ai/driver-version.full"},
        "driver_version_labels_alt": {
            "major": "rebellions.ai/driver-version.major",
            "minor": "rebellions.ai/driver-version.minor",
            "patch": "rebellions.ai/driver-version.patch",
        },
        "upgrade_state_label": "rebellions.ai/npu-driver-upgrade-state",
        "upgrade_skip_label": "rebellions.ai/npu-driver-upgrade.skip",
        "drain_skip_label": "rebellions.ai/npu-driver-upgrade-drain.skip",
        "deploy_skip_label": "rebellions.ai/npu.deploy.skip",
        "annotation_prefix": "rebellions.ai/npu-driver-upgrade",
        "deploy_label_prefix": "rebellions.ai/npu.deploy.",
        "operands": ["driver", "device-plugin", "npu-feature-discovery", "metrics-exporter", "validator"],
        "validator_operand": "validator",
        "resource_prefixes": ["rebellions.ai/"],
        # no DRA driver of the vendor is known here: name it in vendor_profile.dra_drivers when one is used
        "dra_drivers": [],
        "device_node_prefixes": ["/dev/rbln"],
        "kernel_modules": ["rebellions"],
        "main_module": "rebellions",
        "device_glob": "/dev/rbln[0-9]*",
        "smi_command": "rbln-smi",
        "services": ["rbln-daemon"],
        "packaging": [{"name": "rbln", "build": "dkms", "packages": ["rbln-driver"], "detect": ["rbln-driver"]}],
        "userspace_package": "rbln-driver",
        "package_families": ["rbln-*", "rebellions-*"],
        "package_version_suffix": "",
        "image": "rebellions/rbln-driver",
        "tag_format": "{version}-{kernel}-{os_tag}",
        "regular_tag_format": "{version}-{os_tag}",
        "tag_uses_branch": False,
    },
}

_REQUIRED_TYPES: dict[str, type] = {
    "presence_label": str,
    "driver_version_labels": dict,
    "upgrade_state_label": str,
    "upgrade_skip_label": str,
    "drain_skip_label": str,
    "deploy_label_prefix": str,
    "operands": list,
    "resource_prefixes": list,
    "kernel_modules": list,
    "smi_command": str,
    "tag_format": str,
}
_OPTIONAL_TYPES: dict[str, type] = {
    "display_name": str,
    "driver_version_labels_alt": dict,
    "deploy_skip_label": str,
    "annotation_prefix": str,
    "validator_operand": str,
    "main_module": str,
    "device_glob": str,
    "services": list,
    # packages: an explicit target set (a custom vendor's, or an override); it wins over packaging
    "packages": list,
    "packaging": list,
    "packaging_default": str,
    "companion_packages": list,
    "userspace_package": str,
    "package_families": list,
    "package_version_suffix": str,
    "image": str,
    "regular_tag_format": str,
    "tag_uses_branch": bool,
    "dra_drivers": list,
    "device_node_prefixes": list,
    "runtime_class_names": list,
    "visible_devices_env": str,
    "dra_kubelet_plugin_selector": str,
    "supported_gpus_files": list,
    "supported_gpus_packages": list,
    "pci_vendor_id": str,
}

# A DRA driver name is a DNS subdomain (resource.k8s.io/v1 DeviceRequestAllocationResult.driver).
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ProfileError(ValueError, FleetError):
    """An unknown vendor or an invalid profile field (message names vendor and key)."""


def resolve_profile(
    vendor: str,
    overrides: Optional[Mapping[str, Any]] = None,
    extra_vendors: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> dict[str, Any]:
    """Return the profile for ``vendor`` with ``overrides`` applied.

    ``extra_vendors`` maps new vendor names (AMD, Intel Gaudi, ...) to complete profiles, or to
    partial ones that name a built-in base with ``base: nvidia``. Raises ProfileError.
    """
    known = dict(BUILTIN_PROFILES)
    for name, prof in (extra_vendors or {}).items():
        if not isinstance(prof, Mapping):
            raise ProfileError("vendor profile %r must be a mapping, got %s" % (name, type(prof).__name__))
        base_name = prof.get("base")
        base = copy.deepcopy(known.get(base_name, {})) if base_name else {}
        if base_name and base_name not in known:
            raise ProfileError("vendor profile %r: base %r is not a known vendor" % (name, base_name))
        base.update({k: v for k, v in prof.items() if k != "base"})
        known[name] = base
    if vendor not in known:
        raise ProfileError("unknown vendor %r; known vendors: %s" % (vendor, ", ".join(sorted(known))))
    profile = copy.deepcopy(known[vendor])
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(profile.get(key), dict):
            profile[key] = dict(profile[key], **value)
        else:
            profile[key] = copy.deepcopy(value)
    validate_profile(vendor, profile)
    profile["name"] = vendor
    return profile


def validate_profile(vendor: str, profile: Mapping[str, Any]) -> None:
    """Raise ProfileError for missing required keys, unknown keys or wrong types."""
    for key in _REQUIRED_TYPES:
        if key not in profile:
            raise ProfileError("vendor profile %r: required key %r is missing" % (vendor, key))
    for key, value in profile.items():
        typ = _REQUIRED_TYPES.get(key) or _OPTIONAL_TYPES.get(key)
        if key == "name":
            continue
        if typ is None:
            raise ProfileError(
                "vendor profile %r: unknown key %r; known keys: %s"
                % (vendor, key, ", ".join(sorted(set(_REQUIRED_TYPES) | set(_OPTIONAL_TYPES))))
            )
        if value is not None and not isinstance(value, typ):
            raise ProfileError(
                "vendor profile %r: key %r must be a %s, got %s" % (vendor, key, typ.__name__, type(value).__name__)
            )
    if not profile["driver_version_labels"]:
        raise ProfileError("vendor profile %r: driver_version_labels must not be empty" % vendor)
    if not profile.get("packages") and not profile.get("packaging"):
        raise ProfileError("vendor profile %r: needs packaging flavours or a packages list" % vendor)
    for i, flavour in enumerate(profile.get("packaging") or []):
        if not isinstance(flavour, Mapping) or not flavour.get("name") or not flavour.get("packages"):
            raise ProfileError("vendor profile %r: packaging[%d] needs a name and packages" % (vendor, i))
        optional = flavour.get("optional", [])
        # a per-kernel package is the flavour's own rule (its version is the kernel's, not the driver's)
        ok = isinstance(optional, list) and all(isinstance(t, str) and t and "{kernel}" not in t for t in optional)
        if not ok:
            raise ProfileError(
                "vendor profile %r: packaging flavour %r: optional must be a list of package templates without"
                " {kernel}, got %r"
                % (vendor, flavour["name"], optional)
            )
        if flavour.get("module_flavour") not in (None,) + MODULE_FLAVOURS:
            raise ProfileError(
                "vendor profile %r: packaging flavour %r: module_flavour must be %s (or absent), got %r"
                % (vendor, flavour["name"], " or ".join(MODULE_FLAVOURS), flavour.get("module_flavour"))
            )
        since = flavour.get("branchless_from")
        if since is not None and (isinstance(since, bool) or not isinstance(since, int) or since <= 0):
            raise ProfileError(
                "vendor profile %r: packaging flavour %r: branchless_from must be a branch number (590), got %r"
                % (vendor, flavour["name"], since)
            )
        pin = flavour.get("pinning")
        if pin is not None and not (isinstance(pin, str) and ("{version}" in pin) != ("{branch}" in pin)):
            raise ProfileError(
                "vendor profile %r: packaging flavour %r: pinning must be a package template with one of {version}"
                " or {branch} (nvidia-driver-pinning-{version}), got %r" % (vendor, flavour["name"], pin)
            )
        if flavour.get("build") not in BUILDS:
            raise ProfileError(
                "vendor profile %r: packaging flavour %r: build must be %s, got %r"
                % (vendor, flavour["name"], " or ".join(BUILDS), flavour.get("build"))
            )
    _validate_device_keys(vendor, profile)
    default = profile.get("packaging_default")
    if default and default not in [f["name"] for f in profile.get("packaging") or []]:
        raise ProfileError("vendor profile %r: packaging_default %r is not one of its flavours" % (vendor, default))


def _validate_device_keys(vendor: str, profile: Mapping[str, Any]) -> None:
    """The keys that say how a pod gets the device besides resource_prefixes: lists of non-empty
    strings; DRA driver names DNS subdomains (at most 253 characters); device-node prefixes under /dev/;
    the plugin selector a label selector the drain's parser accepts."""
    for key in ("dra_drivers", "device_node_prefixes", "runtime_class_names"):
        for i, item in enumerate(profile.get(key) or []):
            if not isinstance(item, str) or not item:
                raise ProfileError(
                    "vendor profile %r: %s[%d] must be a non-empty string, got %r" % (vendor, key, i, item)
                )
    for name in profile.get("dra_drivers") or []:
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise ProfileError(
                "vendor profile %r: dra_drivers entry %r is not a DRA driver name (a DNS subdomain such as "
                "gpu.nvidia.com)" % (vendor, name)
            )
    for path in profile.get("device_node_prefixes") or []:
        if not path.startswith("/dev/") or path == "/dev/":
            raise ProfileError(
                "vendor profile %r: device_node_prefixes entry %r must start with /dev/ and name the vendor's "
                "device nodes (e.g. /dev/nvidia); all of /dev is not a vendor's" % (vendor, path)
            )
    selector = profile.get("dra_kubelet_plugin_selector")
    if selector is not None:
        if not selector.strip():
            raise ProfileError(
                "vendor profile %r: dra_kubelet_plugin_selector must not be empty (it would match every "
                "DaemonSet pod); leave the key out or set it to null for none" % vendor
            )
        bad = [t for t in _selector_terms(selector) if not _SELECTOR_TERM.match(t)]
        if bad:
            raise ProfileError(
                "vendor profile %r: dra_kubelet_plugin_selector %r: invalid label selector term %r (forms: k=v, "
                "k!=v, k, !k, k in (a,b), k notin (a,b))" % (vendor, selector, bad[0])
            )


# The label selector terms k8s/selectors.py parses (its grammar), checked here without importing it:
# the driver layer may not import k8s/ (this module is in the host-side scripts' import closure).
# test_selectors.py holds this pattern to the parser's language.
_SELECTOR_TERM = re.compile(
    r"^\s*(?:[A-Za-z0-9./_-]+\s+(?:in|notin)\s*\([^()]*\)|[A-Za-z0-9./_-]+\s*(?:==|=|!=)\s*[A-Za-z0-9._-]*"
    r"|!?\s*[A-Za-z0-9./_-]+)\s*$"
)


def _selector_terms(selector: str) -> list[str]:
    """The comma-separated terms of a label selector; commas inside ``( )`` belong to their term."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    return terms + [cur]


def deploy_label_keys(profile: Mapping[str, Any]) -> list[str]:
    """Operand deploy label keys (``<prefix><operand>``) in operand-chain order."""
    return [profile["deploy_label_prefix"] + op for op in profile["operands"]]


def annotation_key(profile: Mapping[str, Any], suffix: str) -> str:
    """Annotation key under the vendor's upgrade prefix, e.g. ``nvidia.com/gpu-driver-upgrade-<suffix>``."""
    prefix = profile.get("annotation_prefix") or profile["upgrade_state_label"].rsplit("-state", 1)[0]
    return "%s-%s" % (prefix, suffix)


def is_accelerator_resource(profile: Mapping[str, Any], resource_name: str) -> bool:
    """True when a container resource name belongs to the vendor (prefix match, as the operators do)."""
    return any(resource_name.startswith(p) for p in profile["resource_prefixes"])


PROFILE_ARG_SPEC: dict[str, dict[str, Any]] = {
    "vendor": {"type": "str", "default": "nvidia"},
    "vendor_profile": {"type": "dict"},
    "vendor_profiles": {"type": "dict"},
}
