"""Filter npuops.fleet.module_utils_closure over a synthetic module_utils tree (expectations written by hand)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.filter.module_utils_closure import FilterModule

PKG = "ansible_collections.npuops.fleet.plugins.module_utils"


def closure(path, root):
    return FilterModule().filters()["module_utils_closure"](str(path), str(root))


def test_follows_imports_through_files_and_adds_package_inits(tmp_path):
    mu = tmp_path / "module_utils"
    for d in ("host", "driver", "k8s"):
        (mu / d).mkdir(parents=True)
        (mu / d / "__init__.py").write_text('"""doc"""\n')
    (mu / "__init__.py").write_text('"""doc"""\n')
    (mu / "host" / "facts.py").write_text("from %s.driver.version import same\nimport os\n" % PKG)
    (mu / "host" / "apt.py").write_text("X = 1\n")
    (mu / "driver" / "version.py").write_text("def same(a, b):\n    return a == b\n")
    (mu / "k8s" / "client.py").write_text("Y = 2\n")  # nobody imports it
    script = tmp_path / "check.py"
    script.write_text("from %s.host import facts, apt  # noqa\n" % PKG)
    assert closure(script, mu) == [
        "__init__.py",
        "driver/__init__.py",
        "driver/version.py",
        "host/__init__.py",
        "host/apt.py",
        "host/facts.py",
    ]


def test_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read the imports of .*missing.py"):
        closure(tmp_path / "missing.py", tmp_path)
