"""The docsite (docs/docsite) and the short README that points into it.

- the README stays short and every link in it resolves to a file of the repo;
- extra-docs.yml lists every guide of docs/docsite/rst/ and nothing else;
- the getting-started and first-window guides have runnable (``docs-run``) shell blocks, which
  tests/integration/test_docs_run.py runs on the lab;
- the runbook quotes every refusal and failure message of the roles and playbooks (the literal text
  before the message's first template)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCSITE = REPO / "docs" / "docsite"
RST = DOCSITE / "rst"
sys.path.insert(0, str(REPO / "tests" / "integration"))

from docs_blocks import blocks, runnable_blocks, script  # noqa: E402


def test_readme_is_short_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024, len(text.encode())
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "the README links into the docsite"
    missing = [lk for lk in links if not lk.startswith(("http://", "https://")) and not (REPO / lk).exists()]
    assert not missing, missing
    assert "make demo" in text and "make test" in text
    # every guide is reachable from the README
    assert {p.name for p in RST.glob("*.rst")} <= {Path(lk).name for lk in links}


def test_extra_docs_lists_every_guide():
    index = yaml.safe_load((DOCSITE / "extra-docs.yml").read_text())
    listed = [ref for sec in index["sections"] for ref in sec["toctree"]]
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == {p.stem for p in RST.glob("*.rst")}


def test_each_guide_has_its_label():
    for p in RST.glob("*.rst"):
        assert p.read_text().startswith(f".. _ansible_collections.npuops.fleet.docsite.{p.stem}:\n"), p.name


def test_guides_mark_runnable_blocks():
    for name in ("getting_started", "first_window"):
        found = runnable_blocks(RST / f"{name}.rst")
        assert len(found) >= 2, name
        assert all(b["language"] == "sh" and b["code"].strip() for b in found), found
        assert script(RST / f"{name}.rst").startswith("set -euo pipefail\n")
    assert "make demo" in "".join(b["code"] for b in runnable_blocks(RST / "getting_started.rst"))


def test_blocks_parser():
    text = ("Intro\n\n.. code-block:: sh\n   :class: docs-run other\n\n   a=1\n     echo $a\n\n"
            "Text\n\n.. code:: yaml\n\n   k: v\n")
    got = blocks(text)
    assert [(b["language"], b["classes"], b["code"]) for b in got] == [
        ("sh", ["docs-run", "other"], "a=1\n  echo $a\n"), ("yaml", [], "k: v\n")]


def _messages(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("ansible.builtin.fail", "fail") and isinstance(v, dict) and isinstance(v.get("msg"), str):
                out.append(v["msg"])
            if k in ("ansible.builtin.assert", "assert") and isinstance(v, dict) and isinstance(v.get("fail_msg"), str):
                out.append(v["fail_msg"])
            _messages(v, out)
    elif isinstance(node, list):
        for x in node:
            _messages(x, out)


def test_runbook_quotes_every_role_and_playbook_failure():
    runbook = " ".join((RST / "runbook.rst").read_text().split())
    missing = []
    for f in sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml")]):
        found: list[str] = []
        _messages(yaml.safe_load(f.read_text()), found)
        for msg in found:
            literal = " ".join(msg.split("{{")[0].split())
            if len(literal) >= 8 and literal not in runbook:
                missing.append(f"{f.relative_to(REPO)}: {literal!r}")
    assert not missing, "messages the runbook does not quote:\n" + "\n".join(missing)
