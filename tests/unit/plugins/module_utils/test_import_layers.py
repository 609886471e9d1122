"""The module_utils layers and the direction of their imports, read from the import graph.

The allowed edges are written here, independently of the product's own closure helper; a synthetic
tree checks that the checker itself flags a wrong edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MU = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"
PKG = "ansible_collections.npuops.fleet.plugins.module_utils"
LAYERS = ("k8s", "driver", "host", "upgrade", "window", "fleet")
# layer -> the layers it may import ("errors" is the one shared base file)
ALLOWED = {
    "k8s": {"k8s", "errors"},
    "driver": {"driver", "errors"},
    "host": {"host", "driver", "errors"},
    "fleet": {"fleet", "driver", "k8s", "errors"},
    "upgrade": {"upgrade", "k8s", "driver", "fleet", "errors"},
    "window": {"window", "k8s", "errors"},
    "errors": {"errors"},
}


def layer_of(rel: str) -> str:
    head = rel.split("/", 1)[0]
    return head[:-3] if head.endswith(".py") else head


def edges(root: Path) -> list[tuple[str, str]]:
    """(file, imported module path) for every collection-internal import under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module] + ["%s.%s" % (node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.level:
                out.append((rel, "<relative import>"))
                continue
            for mod in mods:
                if mod.startswith(PKG + "."):
                    sub = mod[len(PKG) + 1 :].replace(".", "/")
                    if (root / (sub + ".py")).is_file() or (root / sub).is_dir():
                        out.append((rel, sub))
    return out


def violations(root: Path) -> list[str]:
    bad = []
    for rel, sub in edges(root):
        if rel == "__init__.py":
            continue
        src, dst = layer_of(rel), layer_of(sub)
        if sub == "<relative import>":
            bad.append("%s: relative import (write the full ansible_collections... path)" % rel)
        elif src not in ALLOWED:
            bad.append("%s: not in a layer folder" % rel)
        elif dst not in ALLOWED[src]:
            bad.append("%s (%s) imports %s (%s)" % (rel, src, sub, dst))
    return sorted(set(bad))


def test_every_module_utils_file_lives_in_a_layer():
    flat = sorted(p.name for p in MU.glob("*.py") if p.name not in ("__init__.py", "errors.py"))
    assert flat == []
    assert sorted(p.name for p in MU.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_says_what_belongs_there(layer):
    doc = ast.get_docstring(ast.parse((MU / layer / "__init__.py").read_text()))
    assert doc and len(doc) > 80
    assert "import" in doc.lower()  # and what it may import


def test_imports_point_down_the_layers():
    assert edges(MU), "the graph reader found no import at all"
    assert violations(MU) == []


def test_host_and_driver_never_import_ansible():
    for layer in ("host", "driver"):
        for path in (MU / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                assert not any(n == "ansible" or n.startswith("ansible.") for n in names), path


def test_every_file_says_it_is_private():
    for path in MU.rglob("*.py"):
        assert "PRIVATE to the collection" in path.read_text().split('"""', 1)[0], path


def test_the_checker_flags_an_upward_import(tmp_path):
    for d in ("k8s", "upgrade", "driver"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "upgrade" / "states.py").write_text("X = 1\n")
    (tmp_path / "driver" / "version.py").write_text("from %s.k8s import retry\n" % PKG)
    (tmp_path / "k8s" / "retry.py").write_text("from %s.upgrade.states import X\n" % PKG)
    (tmp_path / "k8s" / "wait.py").write_text("from ..upgrade import states\n")
    flagged = violations(tmp_path)
    assert {v.split(" ", 1)[0].rstrip(":") for v in flagged} == {"driver/version.py", "k8s/retry.py", "k8s/wait.py"}
    assert any("imports upgrade/states" in v for v in flagged)
