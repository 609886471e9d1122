"""The action tests run a playbook through ansible-playbook (the plugins are never imported into the
test process: controller code there would switch module_utils to controller mode for the module tests
that run after them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def playbook(tmp_path):
    """playbook(text, *args, **env) -> CompletedProcess of ansible-playbook on ``text`` (in tmp_path)."""

    def run(text: str, *args: str, **env: str) -> subprocess.CompletedProcess:
        (tmp_path / "pb.yml").write_text(text)
        full_env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"),
            ANSIBLE_LOCALHOST_WARNING="False",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
            **env,
        )
        return subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), *args, str(tmp_path / "pb.yml")],
            env=full_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run
