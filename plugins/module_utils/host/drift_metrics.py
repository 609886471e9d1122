# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Driver drift metrics: the facts of ``host/driver_facts.gather`` as Prometheus text exposition format
(version 0.0.4, what node_exporter's textfile collector reads), pure.

Every metric is a gauge. Versions are labels of ``*_info`` series whose value is 1; an unknown
version is the empty label value. Verdicts are not recomputed here: the facts carry
``driver_verdict.py``'s verdict and the one version rule (``driver_version.same_driver_version``)
decides whether the next boot changes the driver.

Metric names (prefix ``npu_driver_``)::

    version_info{source="loaded|userspace|on_disk_boot", version, kernel}    1
    verdict{verdict}                           1 for the host's verdict, 0 for the others
    mismatch{verdict}                          1 when the verdict is reload_required or rebuild_required
    reboot_pending                             1 when /var/run/reboot-required exists or the boot kernel
                                               is not the running one
    reboot_changes_driver{kernel}              1 when the module on disk for the boot kernel is another
                                               driver version than the loaded one (or either is unknown
                                               while the other is known)
    package_held{package, kind="driver|kernel|kernel_meta"}   1 held, 0 not
    packages_unheld                            number of those not held (container / CUDA toolkits that
                                               the holds leave alone on purpose are not listed)
    smi_status{status}                         1 for the smi tool's last status: ok, mismatch,
                                               no_devices, no_driver, error (also a timeout), missing
    devices                                    devices the smi tool listed (absent when it said nothing)
    unattended_upgrades_enabled                1 when unattended-upgrades runs periodically
    unattended_upgrades_can_touch              1 when it runs and its blacklist leaves a driver or
                                               kernel package family uncovered
    unattended_upgrades_uncovered_info{family} 1 per uncovered family (only while it runs)
    ipvs_required                              1 when kube-proxy uses IPVS (absent when the mode says
                                               nothing can be known)
    ipvs_loadable{kernel, module}              1 when ``modprobe -n -S <boot kernel>`` resolves it
    drift_check_success                        1 when the last check gathered the facts, else 0
    drift_check_last_run_timestamp_seconds     Unix time of the last check
    drift_check_last_success_timestamp_seconds Unix time of the last successful check (0: never)
    drift_check_duration_seconds               how long the last check took
    drift_check_interval_seconds               the timer's interval (for the staleness alert)
"""

from __future__ import annotations

import fnmatch
import math
import re
from typing import Any, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.verdict import VERDICTS
from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version, same_driver_version

PREFIX = "npu_driver_"
MISMATCH_VERDICTS = ("reload_required", "rebuild_required")
# the package_holds role's default package_holds_exclude (and driver_upgrade_hold_exclude)
HOLD_EXCLUDE = ("nvidia-container-toolkit*", "libnvidia-container*", "cuda-toolkit*")
LAST_SUCCESS = PREFIX + "drift_check_last_success_timestamp_seconds"


def escape_label_value(value: Any) -> str:
    """A label value as the exposition format writes it between double quotes: backslash, double quote
    and line feed escaped (``\\\\``, ``\\"``, ``\\n``). None is the empty string."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text: backslash and line feed escaped (double quotes stay as they are)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: Any) -> str:
    """Sample value: bools as 1/0, ints as ints, floats in Python's shortest round-trip form."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    raise TypeError("metric value must be a number, not %r" % (value,))


class Exposition:
    """Families in the order added; each ``family()`` writes its HELP and TYPE lines once."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, help_text: str, samples: Iterable[tuple[Mapping[str, Any], Any]]) -> None:
        """Add gauge ``name`` with ``samples`` (``(labels, value)`` pairs; labels written in the given order).
        A family without samples is left out entirely."""
        samples = list(samples)
        if not samples:
            return
        full = PREFIX + name
        self.lines.append("# HELP %s %s" % (full, escape_help(help_text)))
        self.lines.append("# TYPE %s gauge" % full)
        for labels, value in samples:
            if labels:
                body = ",".join('%s="%s"' % (k, escape_label_value(v)) for k, v in labels.items())
                self.lines.append("%s{%s} %s" % (full, body, format_value(value)))
            else:
                self.lines.append("%s %s" % (full, format_value(value)))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""


def _check_families(exp: Exposition, check: Mapping[str, Any]) -> None:
    exp.family("drift_check_success", "1 when the last drift check succeeded.",
               [({}, bool(check.get("success")))])
    exp.family("drift_check_last_run_timestamp_seconds", "Unix time of the last drift check.",
               [({}, float(check["last_run"]))])
    exp.family("drift_check_last_success_timestamp_seconds",
               "Unix time of the last successful drift check (0 - never).",
               [({}, float(check.get("last_success") or 0))])
    if check.get("duration") is not None:
        exp.family("drift_check_duration_seconds", "Duration of the last drift check.",
                   [({}, float(check["duration"]))])
    if check.get("interval") is not None:
        exp.family("drift_check_interval_seconds", "Interval of the drift check timer.",
                   [({}, float(check["interval"]))])


def render(
    facts: Mapping[str, Any],
    check: Mapping[str, Any],
    ipvs: Optional[Mapping[str, bool]] = None,
    ipvs_required: Optional[bool] = None,
    hold_exclude: Optional[list] = None,
) -> str:
    """Exposition text (str, newline-terminated) for one successful check.

    ``facts``: ``driver_facts.gather``'s dict (keys used: vendor, module, loaded_version,
    userspace_version, userspace_source, on_disk_boot_version, boot_kernel, running_kernel, verdict,
    reboot_required, kernel_reboot_pending, held_packages, installed_driver_packages,
    booted_kernel_packages, kernel_meta_packages, unattended_upgrades). ``check``: ``last_run``,
    ``last_success`` (Unix seconds), optional ``duration`` and ``interval`` (seconds); ``success`` is
    implied. ``ipvs``: module -> loadable for the boot kernel, None when not checked; ``ipvs_required``:
    kube-proxy uses IPVS (None: unknown, no series). ``hold_exclude``: fnmatch patterns of driver-family
    packages that need no hold (default HOLD_EXCLUDE, package_holds' own default).
    """
    exp = Exposition()
    boot = facts.get("boot_kernel")
    vendor = facts.get("vendor")
    exp.family(
        "version_info",
        "Driver version by source (loaded module, userspace, module on disk for the boot kernel).",
        [
            ({"vendor": vendor, "source": "loaded", "version": normalize_version(facts.get("loaded_version")) or "",
              "kernel": facts.get("running_kernel")}, 1),
            ({"vendor": vendor, "source": "userspace",
              "version": normalize_version(facts.get("userspace_version")) or "", "kernel": ""}, 1),
            ({"vendor": vendor, "source": "on_disk_boot",
              "version": normalize_version(facts.get("on_disk_boot_version")) or "", "kernel": boot}, 1),
        ],
    )
    verdict = facts.get("verdict")
    exp.family("verdict", "1 for the host's driver verdict, 0 for the others.",
               [({"verdict": v}, v == verdict) for v in VERDICTS])
    exp.family("mismatch",
               "1 when loaded module, boot kernel's module and userspace disagree.",
               [({"verdict": verdict}, verdict in MISMATCH_VERDICTS)])

    smi = facts.get("smi") or {}
    # a hung or failing smi tool (a wedged GPU) while the versions agree: the verdict alone says ok
    exp.family("smi_status", "1 for the smi tool's last status (ok, mismatch, no_devices, no_driver, error, missing).",
               [({"status": smi.get("status") or "unknown"}, 1)])
    if facts.get("device_count") is not None:
        exp.family("devices", "Accelerator devices the smi tool listed.", [({}, int(facts["device_count"]))])

    exp.family("reboot_pending", "1 when a reboot is pending (reboot-required or a newer boot kernel).",
               [({}, bool(facts.get("reboot_required") or facts.get("kernel_reboot_pending")))])
    loaded = normalize_version(facts.get("loaded_version"))
    on_disk = normalize_version(facts.get("on_disk_boot_version"))
    changes = bool(loaded or on_disk) and not same_driver_version(loaded, on_disk)
    exp.family("reboot_changes_driver",
               "1 when the next boot loads another driver version than the loaded one.",
               [({"kernel": boot}, changes)])

    held = set(facts.get("held_packages") or [])
    # packages the holds leave alone on purpose (package_holds_exclude: container and CUDA toolkits)
    exclude = list(hold_exclude if hold_exclude is not None else HOLD_EXCLUDE)
    pkgs = [(name, "driver") for name in sorted(facts.get("installed_driver_packages") or {})
            if not any(fnmatch.fnmatchcase(name, pat) for pat in exclude)]
    pkgs += [(name, "kernel") for name in facts.get("booted_kernel_packages") or []]
    pkgs += [(name, "kernel_meta") for name in facts.get("kernel_meta_packages") or []]
    exp.family("package_held", "1 when the driver or kernel package has dpkg selection hold.",
               [({"package": name, "kind": kind}, name in held) for name, kind in pkgs])
    exp.family("packages_unheld", "Installed driver and kernel packages without a hold.",
               [({}, sum(1 for name, _kind in pkgs if name not in held))])

    uu = facts.get("unattended_upgrades") or {}
    uu_on = bool(uu.get("enabled"))
    uncovered = list(uu.get("uncovered_families") or []) if uu_on else []
    exp.family("unattended_upgrades_enabled", "1 when unattended-upgrades runs periodically.", [({}, uu_on)])
    exp.family("unattended_upgrades_can_touch",
               "1 when unattended-upgrades may upgrade driver or kernel packages.",
               [({}, bool(uncovered))])
    exp.family("unattended_upgrades_uncovered_info",
               "Driver or kernel package families unattended-upgrades may upgrade.",
               [({"family": fam}, 1) for fam in uncovered])

    if ipvs_required is not None:
        exp.family("ipvs_required", "1 when kube-proxy on this host uses IPVS.", [({}, ipvs_required)])
    if ipvs is not None:
        exp.family("ipvs_loadable", "1 when the IPVS module resolves in the boot kernel's module index.",
                   [({"kernel": boot, "module": m}, ok) for m, ok in ipvs.items()])

    _check_families(exp, dict(check, success=True))
    return exp.text()


def render_failure(check: Mapping[str, Any], error: str) -> str:
    """Exposition text for a failed check: only the check's own series, success 0, ``last_success``
    carried over, and ``drift_check_error_info{error}`` (an exception class name). ``check`` as for
    :func:`render`. The host's driver series are left out: stale values must not look current."""
    exp = Exposition()
    exp.family("drift_check_error_info", "The last drift check's failure.", [({"error": error}, 1)])
    _check_families(exp, dict(check, success=False))
    return exp.text()


_LAST_SUCCESS_RE = re.compile(r"^%s\s+(\S+)\s*$" % re.escape(LAST_SUCCESS), re.M)


def parse_last_success(text: Optional[str]) -> float:
    """The last success timestamp of a previous exposition (the file the check wrote before); 0.0 when
    there is none or it is unreadable."""
    m = _LAST_SUCCESS_RE.search(text or "")
    if not m:
        return 0.0
    try:
        return float(m.group(1))
    except ValueError:
        return 0.0
