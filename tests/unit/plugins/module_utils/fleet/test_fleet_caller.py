"""CallerWatch: a module process whose playbook was killed sees that its parent chain broke."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ansible_collections.npuops.fleet.plugins.module_utils.fleet import caller
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.caller import CallerWatch, proc_parent

# the directory that holds ansible_collections/ (for the child processes' imports)
COLLECTIONS_ROOT = Path(caller.__file__).parents[6]  # as imported: .../ansible_collections/npuops/fleet/...


def test_the_chain_as_long_as_it_holds():
    parents = {30: 20, 20: 10, 10: 1}
    w = CallerWatch(reader=parents.get, pid=30)
    assert w.chain == [(30, 20), (20, 10)] and w.gone() is None


def test_the_chain_ends_at_the_playbooks_main_process():
    """module 40 -> worker 30 -> main 20 (both ansible-playbook) -> a launcher shell 10 -> nohup 5:
    the launcher ending (its shell logged out) is not the run ending; the worker's is."""
    parents = {40: 30, 30: 20, 20: 10, 10: 5, 5: 1}
    w = CallerWatch(reader=parents.get, pid=40, is_playbook=lambda pid: pid in (30, 20))
    assert w.chain == [(40, 30), (30, 20)]
    parents[20] = 1
    assert w.gone() is None
    parents[30] = 1
    assert "lost its parent 20" in w.gone()


def test_an_ancestor_re_parented_means_the_caller_is_gone():
    parents = {30: 20, 20: 10, 10: 5, 5: 1}
    w = CallerWatch(reader=parents.get, pid=30)
    parents[20] = 1  # the worker (10) was killed: the shell in between now belongs to init
    assert "lost its parent 10" in w.gone()


def test_an_ancestor_that_ended():
    parents = {30: 20, 20: 10, 10: 5, 5: 1}
    w = CallerWatch(reader=parents.get, pid=30)
    del parents[20]
    assert "ended" in w.gone()


def test_a_real_orphan(tmp_path):
    # parent -> child (new session, as Ansible starts a delegated module) -> grandchild; kill the parent
    out = tmp_path / "verdict"
    code = (
        "import os, sys, time\n"
        "sys.path.insert(0, %r)\n"
        "from ansible_collections.npuops.fleet.plugins.module_utils.fleet.caller import CallerWatch\n"
        "w = CallerWatch()\n"
        "open(%r + '.ready', 'w').close()\n"
        "for _i in range(200):\n"
        "    g = w.gone()\n"
        "    if g:\n"
        "        open(%r, 'w').write(g)\n"
        "        break\n"
        "    time.sleep(0.05)\n"
    ) % (str(COLLECTIONS_ROOT), str(out), str(out))
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', %r], "
            "start_new_session=True); time.sleep(60)" % code,
        ]
    )
    deadline = time.time() + 20
    while not (tmp_path / "verdict.ready").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert proc_parent(os.getpid()) is not None
    middle.kill()
    middle.wait()
    deadline = time.time() + 10
    while not out.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert out.exists() and "gone" in out.read_text()
