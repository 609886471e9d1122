#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_driver_facts
short_description: Host-side facts about the GPU/NPU driver, kernel and OS-update state
version_added: 0.1.0
description:
  - Runs on the accelerator host itself (no Kubernetes access) and never changes anything.
  - Compares three driver versions — the loaded kernel module, the module on disk for the kernel the
    host boots next (C(modinfo -k)), and the userspace (C(nvidia-smi), the NVML mismatch line, or the
    utils package) — and gives a verdict C(ok), C(reload_required), C(rebuild_required),
    C(no_driver) or C(no_devices).
  - Every version comparison uses the collection's one rule, C(plugins/module_utils/driver/version.py) -
    epoch and Debian revision dropped, numeric components compared as numbers (C(550.90.07) is
    C(550.90.7)), and a C(major.minor) such as the C(570.124) of NVML's mismatch line matches
    C(570.124.06); a lone major (C(580)) never matches a full version.
  - Also reports the DKMS state per kernel and for the boot kernel (RV(dkms)), the Secure Boot state
    (RV(secure_boot)) and, for NVIDIA, the fabric manager version against the driver's (RV(fabricmanager));
    a command the host lacks (C(dkms), C(mokutil), C(journalctl)) makes its part unknown, never a failure.
  - Also reports pending reboot, held packages, the installed driver and kernel packages,
    unattended-upgrades status (APT::Periodic, C(apt-daily-upgrade.timer), blacklist coverage) and the
    last C(/var/log/apt/history.log) entry that touched driver or kernel packages.
  - Results are returned as C(ansible_facts.npu_driver) and as top-level keys, together with the
    resolved vendor profile (RV(profile)), so that roles take the vendor's host-side data (packages,
    kernel modules, services, device glob) from the one definition in the collection.
extends_documentation_fragment:
  - npuops.fleet.vendor
options:
  expected_version:
    description:
      - The driver version the host should run. Sets RV(expected_match) and RV(target_match); also the
        reference version when the userspace version cannot be read.
    type: str
  boot_kernel:
    description:
      - Kernel release the host will boot next. Default is the newest installed C(/boot/vmlinuz-*).
    type: str
  kernel_release:
    description:
      - Kernel release the host is to be patched to (a kernel patch in the window, e.g.
        C(5.15.0-119-generic)). Sets RV(kernel_patch). RV(boot_kernel) stays the kernel the host boots
        next as installed now.
    type: str
  module_name:
    description:
      - Kernel module whose version is read. Default is the profile's C(main_module) (C(nvidia),
        C(rebellions)), else the last (base) module of its C(kernel_modules).
    type: str
  userspace_packages:
    description:
      - fnmatch patterns of the package whose version is the userspace version when the smi tool
        cannot tell it. Default C(nvidia-utils-*), C(nvidia-smi), C(nvidia-tesla-*-smi), C(nvidia-driver-*)
        for nvidia; the C(detect) patterns of the profile's packaging flavours otherwise.
    type: list
    elements: str
  smi_query_fields:
    description:
      - Fields for C(nvidia-smi --query-gpu). Each becomes a key of RV(devices) (dots as underscores).
    type: list
    elements: str
    default: [index, driver_version, name, memory.total, pci.bus_id]
  history_log:
    description: APT history log to read.
    type: path
    default: /var/log/apt/history.log
  packaging:
    description:
      - The packaging flavour of the profile's C(packaging) list that carries the driver on this host;
        the result is RV(packaging). C(auto) detects it from the installed packages (first flavour in
        the profile's order with an installed C(detect) package; none installed gives C(packaging_default)).
      - The target set (RV(packaging.target), RV(packaging.leaving), RV(packaging.companions)) is filled
        only with O(expected_version).
      - Built in for nvidia - C(cuda-repo-open), C(cuda-repo) (NVIDIA's CUDA repository),
        C(ubuntu-precompiled-server-open), C(ubuntu-precompiled-server) (Canonical's signed
        C(linux-modules-nvidia-<branch>-server[-open]-<kernel>)), C(ubuntu-server-open), C(ubuntu-server)
        (DKMS), C(debian-tesla), C(debian-open), C(debian) (Debian's archive); C(rbln) for rebellions.
      - A name the profile does not have is reported in RV(packaging.error), not a failure.
    type: str
    default: auto
  window_record_file:
    description:
      - The pre-window record of M(npuops.fleet.npu_host_window) (its
        O(npuops.fleet.npu_host_window#module:path)); RV(window_record) says whether it exists, i.e.
        whether a killed run left the host's services, holds or apt timers to restore.
    type: path
    default: /var/lib/npuops-fleet/window.json
  device_holders:
    description:
      - Also name the processes that hold the vendor's device files open (RV(device_holders)), by their
        full command line, and say why the main module cannot be unloaded (RV(in_use_reason)). Scans
        C(/proc/*/fd); off by default.
    type: bool
    default: false
  boot_id_file:
    description:
      - File with the kernel's boot id, the host side of RV(identity.boot_id) (the kubelet reports the same
        value as C(status.nodeInfo.bootID)). Change it only where the booted kernel is simulated.
    type: path
    default: /proc/sys/kernel/random/boot_id
  pci_devices_dir:
    description:
      - The kernel's PCI device directory, where RV(pci_gpus) are read (each device's C(vendor), C(device),
        C(class), C(subsystem_vendor), C(subsystem_device)). Change it only where the PCI bus is simulated.
    type: path
    default: /sys/bus/pci/devices
  kernel_log_file:
    description:
      - A file to read the kernel log from instead of C(journalctl -k -b) / C(dmesg) (RV(kernel_log)). Set it
        only where the kernel is simulated.
    type: path
  proc_version_file:
    description:
      - File with the loaded module's version when C(/sys/module/<module>/version) is absent. Default
        C(/proc/driver/nvidia/version) for nvidia, none otherwise.
    type: path
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  facts:
    support: full
    description: Sets C(ansible_facts.npu_driver).
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Read driver facts
  npuops.fleet.npu_driver_facts:
    vendor: nvidia
    expected_version: 550.90.07

- name: Fail on a driver/library mismatch
  ansible.builtin.assert:
    that: ansible_facts.npu_driver.verdict == 'ok'
    fail_msg: "{{ ansible_facts.npu_driver.verdict_reason }}"
"""

RETURN = r"""
window_record:
  description: Whether O(window_record_file) exists (a run that did not finish left the host's pre-window state there).
  returned: always
  type: bool
verdict:
  description: C(ok), C(reload_required), C(rebuild_required), C(no_driver) or C(no_devices).
  returned: always
  type: str
verdict_reason:
  description:
    - Human text, for example C(module reload or reboot required - kernel module 460.56 vs userspace 460.73.01)
      or C(a reboot will not fix this - the installed module is 520.56.06 ...).
  returned: always
  type: str
healthy:
  description: verdict == ok.
  returned: always
  type: bool
expected_match:
  description: All known versions equal O(expected_version); null without it.
  returned: always
  type: bool
target_match:
  description:
    - Each version source compared with O(expected_version) by the collection's one version rule;
      null without O(expected_version). Use these rather than comparing version strings in Jinja
      (C(==) says C(550.90.07) differs from C(550.90.7) and C(580.126.09-1) from C(580.126.09)).
    - A source whose version is unknown is C(false).
  returned: always
  type: dict
  contains:
    loaded:
      description: RV(loaded_version) is the target.
      type: bool
    userspace:
      description: The userspace version (RV(userspace_version_raw)) is the target.
      type: bool
    on_disk_boot:
      description: RV(on_disk_boot_version) (the module the boot kernel will load) is the target.
      type: bool
    smi:
      description:
        - The version the smi tool reports is the target - C(rbln-smi)'s C(KMD ver), or the
          C(driver_version) of every device C(nvidia-smi) lists (all must match; none listed, or a
          device without it, is C(false)).
      type: bool
    all:
      description:
        - C(loaded), C(on_disk_boot) and C(smi) are true, and C(userspace) too when the userspace version is known.
      type: bool
  sample: {loaded: true, userspace: true, on_disk_boot: true, smi: true, all: true}
smi_driver_version:
  description:
    - The driver version the smi tool reports - C(rbln-smi)'s C(KMD ver), or C(nvidia-smi)'s per-device
      C(driver_version) (of the first device that gives one; RV(target_match.smi) checks every device). Null when the
      tool reports none (not installed, NVML mismatch, no devices, C(driver_version) not among
      O(smi_query_fields)).
  returned: always
  type: str
  sample: 580.126.09
running_kernel:
  description: C(uname -r).
  returned: always
  type: str
boot_kernel:
  description: Kernel release the host boots next.
  returned: always
  type: str
installed_kernels:
  description: Releases with C(/boot/vmlinuz-<release>), oldest first.
  returned: always
  type: list
kernel_patch:
  description:
    - What a patch to O(kernel_release) means here; null without O(kernel_release). C(needed) when the host
      does not run it; C(installed) when its C(/boot/vmlinuz-*) is there already; C(boots_next) when,
      installed, it is the kernel the host boots by default (the newest installed, as RV(boot_kernel));
      C(newer_installed) the installed releases that would boot instead.
  returned: always
  type: dict
  sample: {release: 5.15.0-119-generic, running: 5.15.0-107-generic, needed: true, installed: false,
           boots_next: true, newer_installed: []}
loaded_version:
  description: Version of the loaded kernel module, null when not loaded.
  returned: always
  type: str
on_disk_versions:
  description:
    - Release -> version of the module on disk for that kernel (null = missing), from
      C(modinfo -k <release> -F version) of the module, or of the file that carries it under another
      name (see RV(modprobe_names)).
  returned: always
  type: dict
on_disk_boot_version:
  description: Version of the module on disk for RV(boot_kernel).
  returned: always
  type: str
userspace_version:
  description: Userspace driver version (Debian revision dropped).
  returned: always
  type: str
userspace_version_raw:
  description: Userspace driver version as read (package version with epoch and revision, NVML major.minor).
  returned: always
  type: str
devices:
  description: Devices as the smi tool lists them; N/A-style fields are null.
  returned: always
  type: list
device_count:
  description: Number of devices the smi tool lists; null when the tool could not tell.
  returned: always
  type: int
reboot_required:
  description: C(/var/run/reboot-required) exists.
  returned: always
  type: bool
held_packages:
  description: Packages with dpkg selection C(hold).
  returned: always
  type: list
unattended_upgrades:
  description: unattended-upgrades status (installed, periodic, timer, blacklist, uncovered families).
  returned: always
  type: dict
last_driver_package_change:
  description: Newest APT history entry that changed driver or kernel packages (matching packages only).
  returned: always
  type: dict
loaded_modules:
  description:
    - The loaded kernel modules of the driver - the main module, every loaded module that uses it
      (directly or through another, from C(/sys/module/<m>/holders)) and the loaded ones of the
      profile's C(kernel_modules) - mapped to the modules that hold each.
  returned: always
  type: dict
  sample: {nvidia: [nvidia_modeset, nvidia_peermem, nvidia_uvm], nvidia_modeset: [nvidia_drm], nvidia_drm: [],
           nvidia_peermem: [], nvidia_uvm: []}
unload_order:
  description:
    - RV(loaded_modules) in the order they can be removed - users first, the main module last. Empty
      when none is loaded.
  returned: always
  type: list
  sample: [nvidia_drm, nvidia_modeset, nvidia_peermem, nvidia_uvm, nvidia]
load_order:
  description:
    - What to load back after an unload - RV(unload_order) reversed, so a module the host did not have
      loaded stays unloaded; the profile's C(kernel_modules) reversed when none was loaded.
  returned: always
  type: list
modprobe_names:
  description:
    - The name C(modprobe) and C(modinfo) find each driver module's file by on the running kernel
      (module -> name), for the modules of RV(load_order) and the profile's C(kernel_modules) that
      have a file there. Usually the module's own name; Debian's DKMS packages install C(nvidia.ko) as
      C(nvidia-current.ko) (C(nvidia-tesla-535.ko)...) and a headless host has no C(modprobe.d) line
      that maps the name, so C(modprobe nvidia) fails there and C(modprobe nvidia-current) loads the
      module the kernel calls C(nvidia). Found from C(modules.dep) and the files' C(modinfo -F name).
  returned: always
  type: dict
  sample: {nvidia: nvidia-current, nvidia_uvm: nvidia-current-uvm, nvidia_modeset: nvidia-current-modeset}
module_file_conflicts:
  description:
    - Kernel -> module -> the module files (paths as in C(modules.dep)) that carry that module under
      other names, where there is more than one (a stale build beside the new one). Such a module gets
      no entry in RV(modprobe_names) and its on-disk version reads as missing, so a reload or reboot
      onto it is refused instead of loading a file chosen by chance. Empty when none.
  returned: always
  type: dict
  sample: {6.1.0-50-amd64: {nvidia: [extra/nvidia-old.ko, updates/dkms/nvidia-current.ko]}}
module_refcnt:
  description: Use count of the main module (C(/sys/module/<m>/refcnt)); null when not loaded.
  returned: always
  type: int
interrupted_packages:
  description:
    - Installed packages in a state an interrupted or failed dpkg run leaves (not C(ii) - unpacked,
      half-configured, triggers pending, reinstall required), name -> state; fix with C(dpkg --configure -a).
  returned: always
  type: dict
  sample: {nvidia-dkms-580-server-open: iF}
device_holders:
  description:
    - With O(device_holders) - the processes that hold a device file of the vendor open, by full
      command line (C(/proc/<pid>/cmdline), not the 15-character C(comm)). Empty otherwise.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process ID.
      type: int
    cmdline:
      description: Full command line; null when the process ended meanwhile.
      type: str
    devices:
      description: The device files it has open.
      type: list
      elements: str
ipvs_loaded:
  description: Whether kube-proxy's IPVS module (C(/sys/module/ip_vs)) is loaded now, built in or as a module.
  returned: always
  type: bool
in_use_reason:
  description:
    - With O(device_holders) and the main module still loaded with a use count or holders - why it
      cannot be unloaded, naming each holder module and process, for example
      C(module in use - nvidia held by module nvidia_modeset; pid 1346 (/usr/bin/nvidia-persistenced)). Null otherwise.
  returned: always
  type: str
dkms:
  description:
    - DKMS state per kernel from C(dkms status) (dkms 2.x C(name, version, kernel, arch) and 3.x
      C(name/version, kernel, arch) lines, C(added) lines, states with a note), and whether the driver's
      DKMS module is installed for RV(boot_kernel). The driver's DKMS names come from the one table
      C(DRIVER_DKMS_MODULES) of C(plugins/module_utils/host/dkms.py), keyed by the profile's C(main_module)
      (C(nvidia) - C(nvidia) on Ubuntu and the CUDA repository, C(nvidia-current) on Debian,
      C(nvidia-tesla-<branch>), C(nvidia-open); C(rebellions)).
    - With O(expected_version) only that version of the driver's module counts.
    - Without the C(dkms) command RV(dkms.available) is false and the verdict C(unknown); precompiled
      module flavours have no DKMS entry, their verdict is C(missing).
  returned: always
  type: dict
  contains:
    available:
      description: The C(dkms) command exists (and was run).
      type: bool
    ok:
      description: No C(Error!) line and exit code 0 (dkms can print an error and exit 0); null without dkms.
      type: bool
    errors:
      description: C(Error!) lines, each with the lines that explain it.
      type: list
      elements: str
    kernels:
      description: Kernel release -> the DKMS modules built for it, each C({module, version, arch, state, note}).
      type: dict
    registered:
      description: Modules registered but built for no kernel (C(added)), each C({module, version}).
      type: list
      elements: dict
    driver_modules:
      description: The driver's DKMS module names dkms knows.
      type: list
      elements: str
    build_logs:
      description:
        - DKMS build logs of the driver's module at O(expected_version) (any version without it) -
          C(/var/lib/dkms/<module>/<version>/build/make.log) (dkms 3.0) and
          C(/var/lib/dkms/<module>/<version>/<boot kernel>/<arch>/log/make.log) (dkms 3.1).
      type: list
      elements: str
    boot_kernel:
      description: RV(boot_kernel).
      type: str
    boot_kernel_state:
      description:
        - The state of the driver's module for the boot kernel - dkms's word (C(installed), C(built)),
          C(added-only) (known to dkms but not built for that kernel) or C(missing); null without dkms.
      type: str
    boot_kernel_version:
      description: Version of the driver's DKMS module built for the boot kernel; null when none.
      type: str
    boot_kernel_note:
      description: The note after the state, for example C(WARNING! Diff between built and installed module!).
      type: str
    boot_kernel_installed:
      description: The driver's DKMS module is C(installed) for the boot kernel; null without dkms.
      type: bool
    verdict:
      description:
        - C(installed), C(installed-with-warning) (installed with a note), C(built) (not installed),
          C(added-only), C(missing), C(error) (an C(Error!) line and no build for the boot kernel) or
          C(unknown) (no dkms).
      type: str
  sample:
    available: true
    ok: true
    errors: []
    kernels:
      6.1.0-50-amd64: [{module: nvidia-current, version: 535.216.03, arch: x86_64, state: installed, note: null}]
    registered: []
    driver_modules: [nvidia-current]
    boot_kernel: 6.1.0-50-amd64
    boot_kernel_state: installed
    boot_kernel_version: 535.216.03
    boot_kernel_note: null
    boot_kernel_installed: true
    verdict: installed
identity:
  description:
    - What identifies this machine to Kubernetes, as the kubelet reads it - compared with the Node's
      C(status.nodeInfo) (C(machineID), C(systemUUID), C(bootID)) and its C(kubernetes.io/hostname) label
      by O(npuops.fleet.npu_node_upgrade#module:host_identity) before any change. A value the host does
      not have is null.
  returned: always
  type: dict
  contains:
    machine_id:
      description: C(/etc/machine-id), else C(/var/lib/dbus/machine-id) (the kubelet's order).
      type: str
    system_uuid:
      description: C(/sys/class/dmi/id/product_uuid) (root only; absent on hosts without DMI data).
      type: str
    boot_id:
      description: Contents of O(boot_id_file); changes on every boot.
      type: str
    hostname:
      description: The kernel host name (C(uname -n)), lower-cased as the kubelet labels it.
      type: str
  sample: {machine_id: 3d1219c7c4c5404aaa1f6d2a48adfda4, system_uuid: null,
           boot_id: 0f5ef7a2-9d0c-4a5e-8f43-2c1d6a3f0b7e, hostname: gpu-node-17}
kernel_log:
  description:
    - Only when the driver sees fewer GPUs than RV(pci_gpus) (none when no module is loaded - a driver that
      refused every GPU does not stay loaded) - what this boot's kernel log (C(journalctl -k -b), else
      C(dmesg)) says of the driver's last load (from its last C(Nvlink Core is being initialized) line) -
      C(reason) C(module flavour not supported on this GPU) (the open module and a GPU without GSP, the
      proprietary module and a GPU that C(requires use of the NVIDIA open kernel modules)),
      C(GPU not supported by this driver release), else C(GPU lost (hardware/PCIe)) (C(fallen off the bus),
      C(Xid ... 79), a failed probe the refusals do not explain), else null; C(devices) (PCI addresses) and
      C(lines) (the kernel's lines). Null otherwise.
  returned: always
  type: dict
  sample: {reason: module flavour not supported on this GPU, devices: ["0000:03:00.0"],
           lines: ["NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1bb3)",
                   "NVRM: installed in this system is not supported by open"]}
pci_gpus:
  description:
    - The vendor's GPUs on the PCI bus (the profile's C(pci_vendor_id), class VGA C(0x0300) or 3D
      controller C(0x0302); NVSwitches and bridges are not GPUs), sorted by address. Empty for a vendor
      profile without C(pci_vendor_id) and on a host without a PCI bus.
  returned: always
  type: list
  elements: dict
  sample: [{address: "0000:18:00.0", device_id: "0x2330", subsystem_vendor: "0x10de", subsystem_device: "0x16c1"}]
secure_boot:
  description:
    - Secure Boot state - the last byte of the EFI variable
      C(/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9e9d6c3ae) (1 enabled), else
      C(mokutil --sb-state) (a legacy BIOS boot, C(EFI variables are not supported on this system), is
      C(disabled)), else C(unknown). With Secure Boot enabled the kernel refuses a module not signed with
      an enrolled key.
  returned: always
  type: dict
  contains:
    state:
      description: C(enabled), C(disabled) or C(unknown).
      type: str
    source:
      description: C(efivar) or C(mokutil); null when unknown.
      type: str
    detail:
      description: mokutil's other lines (C(SecureBoot validation is disabled in shim)); null otherwise.
      type: str
  sample: {state: enabled, source: efivar, detail: null}
packaging:
  description:
    - The packaging flavour chosen for the host (see O(packaging)) and whether the driver module can be
      had for the running and the boot kernel - what the role's preflight refuses on before any cordon.
    - A DKMS flavour needs each kernel's build tree (C(/lib/modules/<kernel>/build), shipped by
      C(linux-headers-<kernel>)); with Secure Boot enabled it needs DKMS's signing key
      (C(/var/lib/dkms/mok.pub) or C(/var/lib/shim-signed/mok/MOK.der)) enrolled (its SHA-1 fingerprint
      in C(mokutil --list-enrolled)), else the kernel would refuse the module it builds. A precompiled
      flavour needs its per-kernel package from apt, which the role checks with the target set.
  returned: always
  type: dict
  contains:
    name:
      description: The flavour; null when O(packaging) names one the profile lacks.
      type: str
    build:
      description: C(dkms) or C(precompiled).
      type: str
    packages:
      description: The flavour's package templates (C({branch}), C({version}), C({kernel})).
      type: list
      elements: str
    detect:
      description: The flavour's fnmatch patterns of installed packages that identify it.
      type: list
      elements: str
    optional:
      description: The flavour's templates of packages that join the target set only where apt offers them.
      type: list
      elements: str
    source:
      description: C(requested), C(profile) (the profile's explicit C(packages)), C(detected) or C(default).
      type: str
    evidence:
      description: The installed packages that identify the flavour.
      type: list
      elements: str
    installed_flavours:
      description: Every flavour with an installed package, C({name, evidence}), in the profile's order.
      type: list
      elements: dict
    kernels:
      description: Kernel -> C({build_dir, headers_package, headers_installed}) for the running and boot kernel.
      type: dict
    signing:
      description:
        - With Secure Boot enabled and a DKMS flavour, C({key, enrolled}) - enrolled is true (the key's SHA-1
          fingerprint in C(mokutil --list-enrolled)), C(pending) (only in C(mokutil --list-new), not yet
          confirmed in MokManager), false (C(mokutil --test-key) says not enrolled) or null (no mokutil);
          else null.
      type: dict
    problems:
      description:
        - Why the module could not be built or loaded, each naming the kernel and the package or key;
          empty when fine.
      type: list
      elements: str
    kernel_problems:
      description:
        - RV(packaging.problems) of each kernel, kernel -> list (the role checks only the kernels that will
          run the driver).
      type: dict
    signing_problems:
      description: RV(packaging.problems) about Secure Boot signing.
      type: list
      elements: str
    moving:
      description: O(packaging) names a flavour the host does not have installed - the host moves to it.
      type: bool
    module_flavour:
      description:
        - The kernel modules the flavour installs - C(open) or C(proprietary) (NVIDIA's two); null when the
          profile does not say.
      type: str
    other_module_flavours:
      description:
        - The profile's flavours that install the other kernel modules, those with the same build first
          (what a refusal for a GPU the flavour's modules cannot drive suggests).
      type: list
      elements: str
    error:
      description: Why O(packaging) could not be used; null otherwise.
      type: str
    kernel:
      description:
        - The kernel that will run the target driver - O(kernel_release) for a kernel patch, else RV(boot_kernel).
      type: str
    target:
      description: With O(expected_version) - the flavour's packages at that version, installed at exactly it.
      type: list
      elements: str
    target_optional:
      description:
        - With O(expected_version) - the flavour's C(optional) packages at the target version (Debian's
          C(firmware-nvidia-tesla-535-gsp); on Tesla 470 that name is only provided by another package), and
          where RV(packaging.branchless) the host's other branchless driver packages at another driver version
          (C(libnvidia-gl), C(nvidia-modprobe)). The role adds each to the transaction where apt offers it at the
          target version.
      type: list
      elements: str
    target_kernel:
      description:
        - With O(expected_version) - the flavour's per-kernel packages for RV(packaging.kernel)
          (C(linux-modules-nvidia-550-server-open-5.15.0-119-generic)); they carry the kernel's version,
          not the driver's, so apt's newest is taken.
      type: list
      elements: str
    companions:
      description:
        - With O(expected_version) - the profile's C(companion_packages) groups the host has (NVIDIA's
          fabric manager and NSCQ library), each C({packages, templates, evidence}); their packages at the
          target version are in RV(packaging.target), the old branch's in RV(packaging.leaving).
      type: list
      elements: dict
    leaving:
      description:
        - With O(expected_version) - installed packages of the host's current flavour that the target set
          replaces (another branch's, per-kernel ones of every kernel included, or all of a flavour being
          left); the install removes them in its transaction, with the RV(packaging.counterparts) apt offers.
      type: list
      elements: str
    branchless:
      description:
        - With O(expected_version) - the flavour's names carry no branch at that version (from its
          C(branchless_from) branch on; NVIDIA's CUDA repository from 590 - C(nvidia-dkms-open),
          C(libnvidia-compute), C(cuda-drivers)). Read from the version, never from a name.
      type: bool
    pinning:
      description:
        - With O(expected_version), where RV(packaging.branchless) - the package whose apt preferences file keeps
          apt on the target (the flavour's C(pinning), C(nvidia-driver-pinning-590.48.01)); installed in the same
          transaction at whatever version apt offers. Installed pinning packages for another version and branch
          are in RV(packaging.leaving). Null otherwise.
      type: str
    counterparts:
      description:
        - With O(expected_version), on a branch change within the flavour - the old branch's other installed
          packages of the driver's families and their names in the target branch (without a branch where
          RV(packaging.branchless) - C(libnvidia-gl-580) -> C(libnvidia-gl)), C(old name) -> C(new name) (Debian's
          C(libnvidia-tesla-470-cfg1) -> C(libnvidia-tesla-535-cfg1); Tesla branches install side by side,
          so nothing else would remove them). Where apt offers the new name at the target version the role
          installs it and removes the old one in the same transaction; otherwise apt decides (an unnamed
          removal refuses the host in the preflight). The flavours' own and companion packages are not here.
      type: dict
  sample: {name: ubuntu-server-open, build: dkms, source: detected, evidence: [nvidia-dkms-550-server-open],
           kernels: {5.15.0-119-generic: {build_dir: false, headers_package: linux-headers-5.15.0-119-generic,
                                          headers_installed: false}},
           signing: null, error: null,
           problems: ["kernel 5.15.0-119-generic has no build tree for DKMS
                       (/lib/modules/5.15.0-119-generic/build): install linux-headers-5.15.0-119-generic"]}
cdi:
  description:
    - NVIDIA profile only (null otherwise) - the container runtimes' NVIDIA CDI specs (C(/etc/cdi),
      C(/var/run/cdi)), which name the driver's files by version and must be regenerated after an upgrade
      (M(npuops.fleet.npu_cdi_refresh)).
  returned: always
  type: dict
  contains:
    specs:
      description:
        - The host's own specs - vendor C(nvidia.com), a file name without infix (C(nvidia.yaml)); empty when
          the host does not use CDI.
      type: list
      elements: str
    others:
      description:
        - NVIDIA specs of other components (path -> kind) - the GPU Operator toolkit's
          C(management.nvidia.com/gpu), the device plugin's, the DRA driver's; never rewritten.
      type: dict
    nvidia_ctk:
      description: The toolkit's C(nvidia-ctk) is in C(PATH) (null when there is no spec).
      type: bool
  sample: {specs: [/etc/cdi/nvidia.yaml], others: {}, nvidia_ctk: true}
mig:
  description:
    - NVIDIA profile only, while C(nvidia-smi) answers (null otherwise, and for other vendors) - the MIG mode
      of each GPU and, when any GPU is in MIG mode, its GPU instances and their compute instances
      (C(nvidia-smi --query-gpu=index,pci.bus_id,mig.mode.current,mig.mode.pending), C(nvidia-smi mig -lgi),
      C(nvidia-smi mig -lci)). GPU instances live in the driver - a module reload or a reboot removes them;
      M(npuops.fleet.npu_host_window) records the layout before the host work and makes it again after.
  returned: always
  type: dict
  contains:
    layout:
      description:
        - C(gpus) - per GPU C(index), C(pci_bus_id), C(mode) and C(pending) (C(Enabled), C(Disabled), or null
          on a GPU without MIG), and C(instances) in placement order, each C(name) (C(MIG 3g.40gb)),
          C(profile_id), C(placement) (C(start:size)) and C(compute) (its compute instances' names).
      type: dict
    enabled:
      description: Some GPU is in MIG mode.
      type: bool
    devices:
      description: "One line per GPU in MIG mode, C(GPU <index> (<PCI bus id>): <its GPU instances' names>)."
      type: list
      elements: str
    refusals:
      description:
        - Why the layout could not be made again after a reload or reboot, one sentence each - a MIG mode
          change pending (it takes effect at the next GPU reset), or a GPU instance whose compute instances are
          not one default compute instance (only C(nvidia-smi mig -cgi ... -C) layouts are re-made). The
          role's preflight refuses such a host before the cordon.
      type: list
      elements: str
    error:
      description: C(nvidia-smi)'s own words when a MIG read failed; the other keys are then null or empty.
      type: str
  sample:
    layout:
      gpus:
        - {index: 0, pci_bus_id: "00000000:18:00.0", mode: Enabled, pending: Enabled,
           instances: [{name: MIG 3g.40gb, profile_id: 9, placement: "0:4", compute: [MIG 3g.40gb]},
                       {name: MIG 3g.40gb, profile_id: 9, placement: "4:4", compute: [MIG 3g.40gb]}]}
    enabled: true
    devices: ["GPU 0 (00000000:18:00.0): MIG 3g.40gb, MIG 3g.40gb"]
    refusals: []
    error: null
fabricmanager:
  description:
    - NVIDIA profile only (null for other vendors) - the installed fabric manager package
      (C(nvidia-fabricmanager-<branch>), C(nvidia-fabricmanager), else C(cuda-drivers-fabricmanager-<branch>),
      which can be a transitional package) against the driver version. On NVSwitch systems the two must
      be identical, else C(nvidia-fabricmanager) does not start.
    - The driver version is the userspace driver package's (the profile's C(userspace_package)), else the userspace
      version, else the module on disk for the boot kernel, else the loaded module's.
  returned: always
  type: dict
  contains:
    installed:
      description: A fabric manager package is installed.
      type: bool
    package:
      description: The package whose version is compared; null when none.
      type: str
    version:
      description: Its upstream version (epoch and Debian revision dropped).
      type: str
    version_raw:
      description: Its package version as installed.
      type: str
    packages:
      description: Every installed fabric manager package, name -> version.
      type: dict
    driver_version:
      description: The driver version compared with.
      type: str
    driver_source:
      description: Where the driver version comes from (C(dpkg:<package>), C(smi), C(on_disk_boot), ...).
      type: str
    matches_driver:
      description:
        - Fabric manager and driver versions are the same version, component for component (a major.minor
          never matches); null when fabric manager is not installed or the driver version is unknown.
      type: bool
    message:
      description: For example C(fabricmanager 530.30.02 != driver 530.41.03); null when they match.
      type: str
    log_mismatch:
      description:
        - The service's own refusals in this boot's journal (C(journalctl -u nvidia-fabricmanager)), each
          C({fabricmanager, driver, message}).
      type: list
      elements: dict
  sample:
    installed: true
    package: nvidia-fabricmanager-550
    version: 550.127.05
    version_raw: 550.127.05-1
    packages: {nvidia-fabricmanager-550: 550.127.05-1}
    driver_version: "550.120"
    driver_source: dpkg:nvidia-utils-550-server
    matches_driver: false
    message: fabricmanager 550.127.05 != driver 550.120
    log_mismatch: []
profile:
  description:
    - The vendor profile as resolved from O(vendor), O(vendor_profile) and O(vendor_profiles)
      (C(plugins/module_utils/driver/vendor_profiles.py)), with C(name) set to the vendor.
    - "Host-side keys: C(kernel_modules) (unload order), C(main_module), C(packages) and
      C(userspace_package) (with C({branch}) / C({version}) placeholders), C(services), C(smi_command),
      C(device_glob), C(package_families); plus the Kubernetes-side keys (labels, operands, ...)."
  returned: always
  type: dict
  sample:
    name: rebellions
    kernel_modules: [rebellions]
    main_module: rebellions
    packages: [rbln-driver]
    userspace_package: rbln-driver
    services: [rbln-daemon]
    smi_command: rbln-smi
    device_glob: /dev/rbln[0-9]*
"""


import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (  # noqa: E402
    PROFILE_ARG_SPEC,
    ProfileError,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.host import (  # noqa: E402
    driver_facts,
    smi_parsers,  # noqa: E402
    window_record,
)


def main():
    spec = dict(
        expected_version=dict(type="str"),
        boot_kernel=dict(type="str"),
        kernel_release=dict(type="str"),
        module_name=dict(type="str"),
        userspace_packages=dict(type="list", elements="str"),
        smi_query_fields=dict(
            type="list", elements="str", default=list(smi_parsers.NVIDIA_SMI_DEFAULT_FIELDS)
        ),
        history_log=dict(type="path", default="/var/log/apt/history.log"),
        proc_version_file=dict(type="path"),
        boot_id_file=dict(type="path", default="/proc/sys/kernel/random/boot_id"),
        pci_devices_dir=dict(type="path", default="/sys/bus/pci/devices"),
        kernel_log_file=dict(type="path"),
        device_holders=dict(type="bool", default=False),
        packaging=dict(type="str", default="auto"),
        window_record_file=dict(type="path", default=window_record.DEFAULT_PATH),
    )
    spec.update(PROFILE_ARG_SPEC)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    try:
        profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
    except ProfileError as e:
        module.fail_json(msg=str(e))
    facts = driver_facts.gather(driver_facts.ModuleRunner(module), profile, p)
    # A pre-window record left by a killed run: the host is not done until a run restores it.
    facts["window_record"] = os.path.exists(p["window_record_file"])
    module.exit_json(changed=False, ansible_facts={"npu_driver": facts}, **facts)


if __name__ == "__main__":
    main()
