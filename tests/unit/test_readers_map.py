"""The README's reader's map names files that exist: every module, role task file and module_utils path."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MU = ROOT / "plugins" / "module_utils"


def _map_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### A reader's map")
    end = text.find("\n## ", start)
    return text[start : end if end > 0 else None]


def _rows() -> list[list[str]]:
    rows = []
    for line in _map_section().splitlines():
        if line.startswith("| ") and not line.startswith("| Step") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_map_has_a_row_per_step_and_a_paragraph_per_layer():
    assert len(_rows()) >= 10
    for layer in ("upgrade", "window", "fleet", "host", "k8s", "driver"):
        assert "- **`%s/`**" % layer in _map_section()


def test_every_named_file_exists():
    named = 0
    for step, _play, tasks, modules, utils in _rows():
        for name in re.findall(r"`([\w./]+\.yml)`", tasks):
            role, file = name.split("/") if "/" in name else ("driver_upgrade", name)
            assert (ROOT / "roles" / role / "tasks" / file).is_file(), (step, name)
            named += 1
        for name in re.findall(r"`(npu_\w+)`", modules):
            assert (ROOT / "plugins" / "modules" / (name + ".py")).is_file(), (step, name)
            named += 1
        folder = None
        for path in re.findall(r"`([\w/.]+\.py)`", utils):
            if path.startswith("plugins/"):
                assert (ROOT / path).is_file(), (step, path)
            else:
                if "/" in path:
                    folder = path.split("/", 1)[0]
                else:
                    path = "%s/%s" % (folder, path)
                assert (MU / path).is_file(), (step, path)
            named += 1
    assert named > 30
