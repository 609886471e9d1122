"""npu_driver_tag with a node to read, on a controller without the kubernetes library: the task fails with
Ansible's missing-library message, not a traceback (a fresh interpreter, so the import really fails)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[4] / "build" / "collections"

PROGRAM = """
import sys
sys.modules["kubernetes"] = None  # every "import kubernetes..." raises ImportError
sys.path.insert(0, %r)
from ansible.module_utils.testing import patch_module_args
from ansible_collections.npuops.fleet.plugins.modules import npu_driver_tag
with patch_module_args({"node": "gpu-node-1", "vendor": "nvidia"}):
    npu_driver_tag.main()
"""


def test_reading_a_node_without_the_kubernetes_library_names_it():
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM % str(COLLECTIONS)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed"] is True
    assert "kubernetes" in result["msg"] and "Failed to import the required Python library" in result["msg"]
