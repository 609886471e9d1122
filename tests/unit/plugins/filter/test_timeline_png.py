"""The timeline as a picture: timeline_svg's output rendered to PNG by rsvg-convert (Debian's
librsvg2-bin, installed by scripts/bootstrap.sh), decoded and looked at: size, several colours,
not blank. The lab test tests/integration/test_docs_run.py does the same with a real window's
reports/latest.svg. The picture stays in build/docs-run/timeline-unit.png."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from test_timeline import SUMMARY

from ansible_collections.npuops.fleet.plugins.filter.timeline import timeline_svg

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from docs_blocks import png_summary  # noqa: E402


def test_timeline_renders_to_a_png_that_is_not_blank(tmp_path):
    assert shutil.which("rsvg-convert"), "rsvg-convert missing: scripts/bootstrap.sh installs librsvg2-bin"
    svg = tmp_path / "timeline.svg"
    svg.write_text(timeline_svg(SUMMARY))
    out = REPO / "build" / "docs-run" / "timeline-unit.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rsvg-convert", "--background-color=white", "-o", str(out), str(svg)], check=True, timeout=60)
    look = png_summary(out.read_bytes())
    assert look["width"] >= 300 and look["height"] >= 100, look
    assert look["colours"] >= 6, look  # background, text, and the phase colours of the bars
    assert 0.02 <= look["ink"] < 0.9, look
    # a blank picture of the same size is told apart
    blank = tmp_path / "blank.svg"
    size = (look["width"], look["height"])
    blank.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d"/>' % size)
    subprocess.run(["rsvg-convert", "--background-color=white", "-o", str(tmp_path / "blank.png"), str(blank)],
                   check=True, timeout=60)
    empty = png_summary((tmp_path / "blank.png").read_bytes())
    assert empty["colours"] == 1 and empty["ink"] == 0.0, empty
