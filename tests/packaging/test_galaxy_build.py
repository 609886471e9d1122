"""The built collection: no lab or test artefacts in the tarball; installed into a clean collections
path, ansible-doc works for every module and every role (issue 7)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists())


def _run(*cmd: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    built = _run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT))
    assert built.returncode == 0, built.stderr
    tarball = next(out.glob("npuops-fleet-*.tar.gz"))
    cpath = tmp_path_factory.mktemp("collections")
    inst = _run(
        str(BIN / "ansible-galaxy"), "collection", "install", "--force", "--no-deps", "-p", str(cpath), str(tarball)
    )
    assert inst.returncode == 0, inst.stderr
    # Only the clean path (plus the bundled community collections that ship with the `ansible` package).
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(cpath))
    return tarball, env


def test_tarball_has_no_lab_or_test_artefacts(installed):
    tarball, _env = installed
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "plugins/modules/npu_node_upgrade.py" in names
    bad = [n for n in names if n.startswith(("tests/lab", "tests/integration", ".venv", "build/", "bench/", ".ci"))
           or n.endswith((".pyc", ".deb"))]
    assert bad == []
    assert "docs/docsite/extra-docs.yml" in names and "docs/docsite/rst/runbook.rst" in names  # Galaxy's docs
    # 502 with the maintenance window filters
    assert len(names) < 550, "unexpectedly large tarball: %d entries" % len(names)


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_module(installed, module):
    _tarball, env = installed
    res = _run(str(BIN / "ansible-doc"), "npuops.fleet." + module, env=env, cwd=Path("/"))
    assert res.returncode == 0, res.stderr
    assert "EXAMPLES" in res.stdout and "RETURN VALUES" in res.stdout


@pytest.mark.parametrize("role", ROLES)
def test_ansible_doc_role(installed, role):
    _tarball, env = installed
    res = _run(str(BIN / "ansible-doc"), "-t", "role", "npuops.fleet." + role, env=env, cwd=Path("/"))
    assert res.returncode == 0, res.stderr
    assert "ENTRY POINT" in res.stdout


def test_every_module_and_role_found():
    assert {"npu_driver_tag", "npu_matrix_audit", "npu_node_upgrade", "npu_driver_facts", "npu_upgrade_lease"} <= set(
        MODULES
    )
    assert {"driver_upgrade", "package_holds", "unattended_upgrades_guard"} <= set(ROLES)
