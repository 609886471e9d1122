"""CDI specs (case E4): which files are the host's own, what a spec needs on the host, and when it is stale.
The fixture is nvidia-ctk v1.20.2's own output (`cdi generate --mode=management`, lab host at 535.183.06),
cut to one device node and two mounts."""

from __future__ import annotations

import json

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import cdi

SPEC_535 = """\
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
    - name: all
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia-uvm
              hostPath: /run/cdidev/dev/nvidia-uvm
              major: 195
              fileMode: 420
              permissions: rwm
            - path: /dev/nvidia0
              hostPath: /run/cdidev/dev/nvidia0
              major: 195
              fileMode: 420
              permissions: rwm
containerEdits:
    env:
        - NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu
        - NVIDIA_VISIBLE_DEVICES=void
    hooks:
        - hookName: createContainer
          path: /usr/bin/nvidia-cdi-hook
          args:
            - nvidia-cdi-hook
            - enable-cuda-compat
            - --host-driver-version=535.183.06
    mounts:
        - hostPath: /usr/bin/nvidia-smi
          containerPath: /usr/bin/nvidia-smi
          options:
            - ro
        - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06
          containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06
          options:
            - ro
"""
EXPECTED_PATHS = ["/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06",
                  "/run/cdidev/dev/nvidia-uvm", "/run/cdidev/dev/nvidia0", "/usr/bin/nvidia-cdi-hook"]


@pytest.mark.parametrize("use_yaml", [True, False])
def test_what_the_spec_needs_on_the_host_with_and_without_pyyaml(use_yaml):
    got = cdi.load("/etc/cdi/nvidia.yaml", SPEC_535, use_yaml=use_yaml)
    assert got["kind"] == "nvidia.com/gpu"
    assert sorted(got["host_paths"]) == sorted(EXPECTED_PATHS)
    assert got["device_nodes"] == ["/dev/nvidia-uvm", "/dev/nvidia0"]


@pytest.mark.parametrize("text, found", [
    (SPEC_535, True),  # a library name: libcuda.so.535.183.06
    ("--host-driver-version=535.183.06\n", True),
    ("libcuda.so.535.183.061\n", False),
    ("libfoo.so.535.183.06.1\n", False),
    ("libcuda.so.1535.183.06\n", False),
    ("libcuda.so.550.90.07\n", False),
])
def test_the_old_version_is_found_as_a_whole_version_only(text, found):
    assert cdi.stale(text, [], "535.183.06", exists=lambda p: True)["old_version_found"] is found


def test_missing_paths_in_order():
    there = {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cdi-hook"}
    got = cdi.stale(SPEC_535, EXPECTED_PATHS, None, exists=there.__contains__)
    assert got == {"missing": ["/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06", "/run/cdidev/dev/nvidia-uvm",
                               "/run/cdidev/dev/nvidia0"], "old_version_found": False}


def test_a_control_node_left_out_is_lost_but_mig_capabilities_are_not_compared():
    before = ["/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    after = ["/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia0", "/dev/nvidiactl"]
    assert cdi.lost_nodes(before, after) == ["/dev/nvidia-uvm"]


def test_only_the_hosts_own_specs_are_owned(tmp_path):
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.yaml").write_text(SPEC_535)
    (etc / "nvidia.coherent.yaml").write_text(SPEC_535)  # written by nvidia-ctk beside the main spec
    (etc / "old.yml").write_text(SPEC_535)  # the runtimes read no .yml
    (etc / "intel.yaml").write_text("cdiVersion: 0.5.0\nkind: intel.com/gpu\ndevices: []\n")
    (run / "management.nvidia.com-gpu.yaml").write_text(SPEC_535.replace("kind: nvidia.com/gpu",
                                                                         "kind: management.nvidia.com/gpu"))
    (run / "k8s.device-plugin.nvidia.com-gpu.json").write_text(json.dumps(
        {"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu", "devices": []}))
    (run / "nvidia.json").write_text("{not json")
    got = {s["path"][len(str(tmp_path)):]: (s["kind"], s["owned"], s["error"] is not None)
           for s in cdi.find_specs([str(etc), str(run)], lambda p: open(p).read())}
    assert got == {
        "/etc/nvidia.yaml": ("nvidia.com/gpu", True, False),
        "/etc/nvidia.coherent.yaml": ("nvidia.com/gpu", False, False),
        "/run/k8s.device-plugin.nvidia.com-gpu.json": ("k8s.device-plugin.nvidia.com/gpu", False, False),
        "/run/management.nvidia.com-gpu.yaml": ("management.nvidia.com/gpu", False, False),
        "/run/nvidia.json": (None, True, True),  # the host's own by its name, and unreadable: not skipped
    }


def test_the_refresh_units_environment_file():
    text = ('# comment\nNVIDIA_CTK_CDI_OUTPUT_FILE_PATH="/etc/cdi/nvidia.yaml"\n\n'
            "NVIDIA_CTK_CDI_GENERATE_MODE=management\n")
    assert cdi.parse_env_file(text) == {"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH": "/etc/cdi/nvidia.yaml",
                                        "NVIDIA_CTK_CDI_GENERATE_MODE": "management"}
