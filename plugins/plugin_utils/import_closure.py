# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which module_utils files a Python file needs: its import closure inside this collection.

Private to this collection; pure (reads files, no Ansible import). The drift monitor ships exactly this
set to the host, and the import-direction unit test reads the same graph, so neither keeps a list by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Union

MODULE_UTILS = "ansible_collections.npuops.fleet.plugins.module_utils"


def direct_imports(path: Union[str, Path], root: Union[str, Path]) -> set[str]:
    """module_utils files (paths relative to ``root``, the module_utils folder) that ``path`` imports.

    ``from ...module_utils.host import dkms`` names host/dkms.py; ``from ...module_utils.host.dkms import x``
    names host/dkms.py as well. Every package on the way gets its ``__init__.py`` where the folder has one.
    Raises SyntaxError (file and line) when ``path`` is not Python, FileNotFoundError when it is missing.
    """
    root = Path(root)
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module != MODULE_UTILS and not node.module.startswith(MODULE_UTILS + "."):
            continue
        base = node.module[len(MODULE_UTILS) :].lstrip(".").replace(".", "/")
        for alias in node.names:
            sub = (base + "/" + alias.name).lstrip("/")
            if (root / (sub + ".py")).is_file():
                found.add(sub + ".py")
            elif base and (root / (base + ".py")).is_file():
                found.add(base + ".py")
        parts = base.split("/") if base else []
        for i in range(len(parts) + 1):
            init = "/".join(parts[:i] + ["__init__.py"])
            if (root / init).is_file():
                found.add(init)
    return found


def module_utils_closure(path: Union[str, Path], root: Union[str, Path]) -> list[str]:
    """Sorted relative paths of every module_utils file ``path`` needs, directly or through another."""
    root = Path(root)
    todo, closure = [Path(path)], set()
    while todo:
        for rel in direct_imports(todo.pop(), root):
            if rel not in closure:
                closure.add(rel)
                if not rel.endswith("__init__.py"):
                    todo.append(root / rel)
    return sorted(closure)
