# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Driver drift check, run on the host by npu-driver-drift.service (plain python3, no Ansible).

Usage: python3 npu_drift_check.py [CONFIG]   (default /usr/local/lib/npuops-drift/config.json)

Gathers the host's driver facts with the collection's own module_utils (host/driver_facts.py, shipped
next to this file by roles/driver_drift_monitor, so the verdicts are the modules' verdicts) and writes
them as Prometheus text (host/drift_metrics.py) to the config's ``output``, for node_exporter's
textfile collector. The file is replaced atomically (temp file in the same directory, fsync, rename),
so the collector never reads half a file. A failed check writes success 0 and keeps the last success
time; exit status 1 then.

CONFIG (JSON): output (path of the .prom file), vendor, vendor_profile, vendor_profiles,
expected_version, kube_proxy_mode (ipvs|iptables|none|auto), ipvs_modules (list), interval_seconds,
hold_exclude (fnmatch patterns of driver-family packages that need no hold).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # ansible_collections/npuops/fleet/plugins/module_utils/... lies here

from ansible_collections.npuops.fleet.plugins.module_utils.host import drift_metrics, driver_facts  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile  # noqa: E402

DEFAULT_CONFIG = os.path.join(HERE, "config.json")


class SubprocessRunner:
    """driver_facts runner for plain python3 on the host: subprocess with ``LC_ALL=C``, ``PATH`` lookup plus
    the sbin directories (modinfo, modprobe, depmod live there and a timer's PATH may lack them)."""

    SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout

    def run(self, args: list[str]) -> tuple[int, str, str]:
        env = dict(os.environ, LC_ALL="C")
        try:
            r = subprocess.run(
                args, capture_output=True, env=env, timeout=self.timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, "", str(exc)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def bin(self, name: str) -> Optional[str]:
        dirs = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) + list(self.SBIN)
        for d in dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        return None


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (mode 0644): a temp file in the same directory (not matching
    the collector's ``*.prom`` glob), fsync, rename. On any error the temp file is removed and the
    previous file is left as it was; the error propagates."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # node_exporter reads it as user prometheus
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read(path: str):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def ipvs_required(mode: str, seen_file: Optional[str] = None, sys_module: str = "/sys/module/ip_vs"):
    """kube-proxy uses IPVS: ``ipvs`` yes, ``iptables``/``none`` no, ``auto`` once ip_vs has been seen
    loaded on this host. Sticky (``seen_file`` is written the first time): after a reboot into a kernel
    whose module index lacks ip_vs nothing is loaded, and that is exactly when the answer matters."""
    if mode != "auto":
        return mode == "ipvs"
    if seen_file and os.path.exists(seen_file):
        return True
    if os.path.isdir(sys_module):
        if seen_file:
            try:
                with open(seen_file, "w") as f:
                    f.write("ip_vs seen loaded at %d\n" % time.time())
            except OSError:
                pass
        return True
    return False


def check(config: dict, runner=None, now=time.time) -> tuple[str, bool]:
    """One check: ``(exposition text, success)``. Never raises for a failed gathering."""
    runner = runner or SubprocessRunner()
    t0 = now()
    stamp = {"last_run": t0, "interval": config.get("interval_seconds")}
    try:
        profile = resolve_profile(
            config.get("vendor") or "nvidia", config.get("vendor_profile"), config.get("vendor_profiles")
        )
        params = {"vendor": config.get("vendor") or "nvidia", "expected_version": config.get("expected_version")}
        facts = driver_facts.gather(runner, profile, params)
        wanted = ipvs_required(config.get("kube_proxy_mode") or "auto", os.path.join(HERE, "ipvs-seen"))
        ipvs = None
        if wanted:
            modules = list(config.get("ipvs_modules") or [])
            ipvs = driver_facts.ipvs_modules_loadable(runner, facts["boot_kernel"], modules)
        stamp.update(last_success=t0, duration=max(0.0, now() - t0))
        exclude = config.get("hold_exclude")
        return drift_metrics.render(facts, stamp, ipvs=ipvs, ipvs_required=wanted, hold_exclude=exclude), True
    except Exception as exc:  # the failure is the metric; the message goes to the journal
        sys.stderr.write("drift check failed: %s: %s\n" % (type(exc).__name__, exc))
        stamp.update(
            last_success=drift_metrics.parse_last_success(_read(config["output"])), duration=max(0.0, now() - t0)
        )
        return drift_metrics.render_failure(stamp, type(exc).__name__), False


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0] if argv else DEFAULT_CONFIG) as f:
        config = json.load(f)
    text, ok = check(config)
    write_atomic(config["output"], text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
