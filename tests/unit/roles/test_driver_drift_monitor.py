"""roles/driver_drift_monitor: the host check script (atomic write, failure path) and the module_utils
the role ships (the script's whole import closure)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.npuops.fleet.plugins.plugin_utils.import_closure import module_utils_closure

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "driver_drift_monitor"
MU = ROOT / "plugins" / "module_utils"
MU_PKG = "ansible_collections.npuops.fleet.plugins.module_utils"

FACTS = {
    "vendor": "nvidia", "running_kernel": "5.15.0-177-generic", "boot_kernel": "5.15.0-179-generic",
    "loaded_version": "580.126.09", "userspace_version": "580.159.03", "on_disk_boot_version": "580.159.03",
    "verdict": "reload_required", "reboot_required": True, "kernel_reboot_pending": True, "held_packages": [],
    "installed_driver_packages": {"nvidia-utils-580-server": "580.159.03-0ubuntu1"},
    "booted_kernel_packages": [], "kernel_meta_packages": [], "unattended_upgrades": {"enabled": False},
}


@pytest.fixture
def script():
    spec = importlib.util.spec_from_file_location("npu_drift_check", ROLE / "files" / "npu_drift_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def config(tmp_path):
    return {"output": str(tmp_path / "npu_driver_drift.prom"), "vendor": "nvidia", "kube_proxy_mode": "iptables",
            "ipvs_modules": ["ip_vs"], "interval_seconds": 10}


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        self.t += 0.5
        return self.t


def test_success_writes_the_metrics_atomically(script, config, tmp_path, monkeypatch):
    seen = {}

    def gather(runner, profile, params):
        seen.update(profile=profile["name"], params=params)
        return FACTS

    monkeypatch.setattr(script.driver_facts, "gather", gather)
    text, ok = script.check(config, runner=object(), now=Clock(1000.0))
    assert ok and seen == {"profile": "nvidia", "params": {"vendor": "nvidia", "expected_version": None}}
    script.write_atomic(config["output"], text)
    body = Path(config["output"]).read_text()
    assert 'npu_driver_mismatch{verdict="reload_required"} 1\n' in body
    assert "npu_driver_drift_check_success 1\n" in body
    assert "npu_driver_drift_check_last_success_timestamp_seconds 1000.5\n" in body
    assert "npu_driver_drift_check_interval_seconds 10\n" in body
    assert "npu_driver_ipvs_required 0\n" in body and "ipvs_loadable" not in body  # kube_proxy_mode iptables
    assert os.stat(config["output"]).st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path) == ["npu_driver_drift.prom"]  # no temp file left


def test_ipvs_checked_for_the_boot_kernel(script, config, monkeypatch):
    calls = []

    class Runner:
        def bin(self, name):
            return "/sbin/" + name

        def run(self, args):
            calls.append(args)
            return 1, "", "modprobe: FATAL: Module ip_vs not found in directory /lib/modules/5.15.0-179-generic\n"

    monkeypatch.setattr(script.driver_facts, "gather", lambda runner, profile, params: FACTS)
    text, ok = script.check(dict(config, kube_proxy_mode="ipvs"), runner=Runner(), now=Clock(1.0))
    assert ok and calls == [["/sbin/modprobe", "-n", "-S", "5.15.0-179-generic", "ip_vs"]]
    assert "npu_driver_ipvs_required 1\n" in text
    assert 'npu_driver_ipvs_loadable{kernel="5.15.0-179-generic",module="ip_vs"} 0\n' in text


def test_failed_check_success_0_last_success_kept(script, config, monkeypatch):
    monkeypatch.setattr(script.driver_facts, "gather", lambda runner, profile, params: FACTS)
    text, ok = script.check(config, runner=object(), now=Clock(1000.0))
    script.write_atomic(config["output"], text)

    def broken(runner, profile, params):
        raise OSError("dpkg-query: cannot access the status area")

    monkeypatch.setattr(script.driver_facts, "gather", broken)
    text, ok = script.check(config, runner=object(), now=Clock(2000.0))
    assert not ok
    script.write_atomic(config["output"], text)
    body = Path(config["output"]).read_text()
    assert "npu_driver_drift_check_success 0\n" in body
    assert "npu_driver_drift_check_last_run_timestamp_seconds 2000.5\n" in body
    assert "npu_driver_drift_check_last_success_timestamp_seconds 1000.5\n" in body
    assert 'npu_driver_drift_check_error_info{error="OSError"} 1\n' in body
    # the host's driver series of the last success are gone, not left looking current
    assert "npu_driver_mismatch" not in body and "version_info" not in body


def test_failed_check_with_an_unknown_vendor_never_succeeded(script, config):
    text, ok = script.check(dict(config, vendor="amd"), runner=object(), now=Clock(5.0))
    assert not ok
    assert "npu_driver_drift_check_last_success_timestamp_seconds 0\n" in text
    assert 'error="ProfileError"' in text


@pytest.mark.parametrize("where", ["write", "replace"])
def test_interrupted_write_leaves_the_previous_file_whole(script, config, tmp_path, monkeypatch, where):
    previous = "npu_driver_drift_check_success 1\n"
    Path(config["output"]).write_text(previous)
    if where == "replace":
        def replace(src, dst):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(script.os, "replace", replace)
    else:
        real_fdopen = os.fdopen

        class Half:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, text):
                self.f.write(text[: len(text) // 2])
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(script.os, "fdopen", lambda fd, mode: Half(real_fdopen(fd, mode)))
    with pytest.raises(OSError):
        script.write_atomic(config["output"], "npu_driver_drift_check_success 0\n" * 100)
    assert Path(config["output"]).read_text() == previous
    assert os.listdir(tmp_path) == ["npu_driver_drift.prom"]


def test_main_reads_the_config_and_exits_1_on_failure(script, config, tmp_path, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(config, vendor="amd")))
    assert script.main([str(cfg)]) == 1
    assert "npu_driver_drift_check_success 0\n" in Path(config["output"]).read_text()
    monkeypatch.setattr(script.driver_facts, "gather", lambda runner, profile, params: FACTS)
    cfg.write_text(json.dumps(config))
    assert script.main([str(cfg)]) == 0


def _imports(path: Path) -> set[str]:
    """module_utils files (relative paths) that ``path`` imports from the collection."""
    res = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(MU_PKG):
            base = node.module[len(MU_PKG):].lstrip(".").replace(".", "/")
            for alias in node.names:
                sub = (base + "/" + alias.name).lstrip("/")
                if (MU / (sub + ".py")).is_file():
                    res.add(sub + ".py")
                elif base and (MU / (base + ".py")).is_file():
                    res.add(base + ".py")
            if base and (MU / base / "__init__.py").is_file():
                res.add(base + "/__init__.py")
            res.add("__init__.py")  # the module_utils package itself
    return res


def test_the_role_ships_the_scripts_whole_import_closure():
    expr = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_driver_drift_monitor_module_utils"]
    assert "npuops.fleet.module_utils_closure" in expr and "files/npu_drift_check.py" in expr
    shipped = module_utils_closure(ROLE / "files" / "npu_drift_check.py", MU)
    todo, closure = [ROLE / "files" / "npu_drift_check.py"], set()
    while todo:
        for rel in _imports(todo.pop()):
            if rel not in closure:
                closure.add(rel)
                todo.append(MU / rel)
    assert sorted(closure) == sorted(shipped)
    # the layers the check needs, and nothing of the control node's
    assert {"host/driver_facts.py", "driver/version.py", "driver/vendor_profiles.py", "host/__init__.py"} <= closure
    assert not any(rel.startswith(("k8s/", "upgrade/", "window/", "fleet/")) for rel in closure)
    # pure: nothing of Ansible on the host
    for rel in shipped:
        assert "ansible.module_utils" not in (MU / rel).read_text(), rel


def test_subprocess_runner_c_locale_and_missing_commands(script):
    runner = script.SubprocessRunner()
    sh = runner.bin("sh")
    assert sh and runner.bin("no-such-command-npuops") is None
    assert runner.run([sh, "-c", "echo $LC_ALL; echo err >&2; exit 3"]) == (3, "C\n", "err\n")
    rc, out, err = runner.run(["/nonexistent/modinfo"])
    assert rc == 127 and out == "" and err


def test_ipvs_auto_is_remembered_across_a_reboot_that_loses_ip_vs(script, tmp_path):
    """auto: ip_vs seen loaded once means IPVS is required, also after a reboot into a kernel whose
    module index lacks it (nothing is loaded then, which is exactly the incident)."""
    seen, loaded = tmp_path / "ipvs-seen", tmp_path / "sys-ip_vs"
    assert script.ipvs_required("auto", str(seen), str(loaded)) is False and not seen.exists()
    loaded.mkdir()
    assert script.ipvs_required("auto", str(seen), str(loaded)) is True and seen.exists()
    loaded.rmdir()  # the reboot: ip_vs could not be loaded
    assert script.ipvs_required("auto", str(seen), str(loaded)) is True
    assert script.ipvs_required("iptables", str(seen), str(loaded)) is False
    assert script.ipvs_required("ipvs", None, str(loaded)) is True
