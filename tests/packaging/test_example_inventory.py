"""inventories/example as Ansible reads it (ansible-inventory), and the published report schema."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INV = ROOT / "inventories" / "example"


@pytest.fixture(scope="module")
def inventory():
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(INV), "--list"],
        capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out)


def hostvars(inventory, host):
    return inventory["_meta"]["hostvars"].get(host, {})


def test_become_on_the_accelerator_hosts_only(inventory):
    hosts = inventory["accelerator_hosts"]["children"]
    assert set(hosts) == {"gpu_workers", "npu_workers"}
    for group in hosts:
        for host in inventory[group]["hosts"]:
            assert hostvars(inventory, host)["ansible_become"] is True
    # the implicit localhost (Kubernetes calls) inherits group "all" only: no become there
    assert "ansible_become" not in json.dumps(inventory.get("all", {}))
    all_vars = "".join(p.read_text() for p in (INV / "group_vars" / "all").glob("*.yml"))
    assert "ansible_become" not in all_vars


def test_kubeconfig_is_not_built_from_home(inventory):
    for host, hv in inventory["_meta"]["hostvars"].items():
        assert "HOME" not in str(hv.get("npuops_fleet_kubeconfig", "")), host
    text = "".join(p.read_text() for p in INV.rglob("*.yml"))
    assert "lookup('ansible.builtin.env', 'HOME')" not in text


def test_reboot_only_when_needed(inventory):
    for host in inventory["gpu_workers"]["hosts"] + inventory["npu_workers"]["hosts"]:
        hv = hostvars(inventory, host)
        assert hv["driver_upgrade_policy"]["reboot"]["enable"] is False, host
        assert hv["driver_upgrade_reboot_allowed"] is True  # a new boot kernel still gets its reboot


def test_every_host_names_its_node(inventory):
    for group in ("gpu_workers", "npu_workers"):
        for host in inventory[group]["hosts"]:
            assert hostvars(inventory, host)["driver_upgrade_node_name"], host


def test_comments_have_no_internal_case_ids():
    for path in INV.rglob("*.yml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            comment = line.split("#", 1)[1] if "#" in line else ""
            assert not re.search(r"\b(case )?[CD][0-9]{1,2}\b", comment), f"{path}:{n}: {line}"


def test_report_schema_is_a_valid_json_schema():
    import jsonschema

    schema = json.loads((ROOT / "docs" / "maintenance-summary.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": 1}
