"""Make the repo importable as ansible_collections.npuops.fleet (the path Ansible uses)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
_link = os.path.join(COLLECTIONS, "ansible_collections", "npuops", "fleet")
if not os.path.exists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(ROOT, _link)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
