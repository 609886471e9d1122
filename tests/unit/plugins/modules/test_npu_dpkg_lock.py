"""npu_dpkg_lock as a module against a real lock held by another process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.modules import npu_dpkg_lock


def run(monkeypatch, capsys, module, _host, args, check=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_npu_dpkg_lock_module(monkeypatch, capsys, tmp_path):
    lock = tmp_path / "lock-frontend"
    r = run(monkeypatch, capsys, npu_dpkg_lock, None, {"locks": [str(lock)], "timeout": 0})
    assert r["free"] is True and r["holders"] == [] and r["changed"] is False
    code = "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT); fcntl.lockf(fd, fcntl.LOCK_EX); " \
           "print('locked', flush=True); sys.stdin.read()"
    argv = [sys.executable, "-c", code, str(lock), "--from", "unattended-upgrade"]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = run(monkeypatch, capsys, npu_dpkg_lock, None,
                {"locks": [str(lock)], "timeout": 1, "poll_interval": 0.1}, check=True)
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert r["failed"] is True and r["free"] is False and r["waited"] >= 1
    assert r["holders"] == [{"lock": str(lock), "pid": holder.pid, "cmdline": " ".join(argv)}]
    assert str(holder.pid) in r["msg"] and " ".join(argv) in r["msg"] and "1.0 s" in r["msg"]
