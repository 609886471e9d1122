"""The runnable blocks of the docsite's guides, and a look at a rendered PNG.

A guide marks a shell block that a lab test runs with the ``docs-run`` class::

    .. code-block:: sh
       :class: docs-run

       make demo

:func:`runnable_blocks` returns those blocks of one ``.rst`` file in document order, as written
(the directive's indentation removed); :func:`script` joins them into one bash script, so a
variable one block sets is there for the next, as in the reader's shell. :func:`png_summary`
decodes a PNG (8-bit, non-interlaced, as rsvg-convert writes it) with the standard library only."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

MARK = "docs-run"
_DIRECTIVE = re.compile(r"^(\s*)\.\. (?:code-block|code|sourcecode)::\s*(\S*)\s*$")
_OPTION = re.compile(r"^\s+:([\w-]+):\s*(.*)$")


def blocks(text: str) -> list[dict]:
    """Every code block of an RST text: {line, language, classes, code}."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, lang = i + 1, len(m.group(1)), m.group(2)
        i += 1
        classes: list[str] = []
        while i < len(lines) and _OPTION.match(lines[i]):
            name, value = _OPTION.match(lines[i]).groups()
            if name == "class":
                classes += value.split()
            i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        cut = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        out.append({"line": start, "language": lang, "classes": classes,
                    "code": "\n".join(b[cut:] for b in body) + "\n"})
    return out


def runnable_blocks(path: Path) -> list[dict]:
    return [b for b in blocks(Path(path).read_text()) if MARK in b["classes"]]


def script(path: Path) -> str:
    """One bash script of the file's runnable blocks, each preceded by a comment naming its line."""
    parts = ["set -euo pipefail"]
    for b in runnable_blocks(path):
        parts.append("# %s:%d" % (Path(path).name, b["line"]))
        parts.append("echo '>>> %s:%d'" % (Path(path).name, b["line"]))
        parts.append(b["code"].rstrip("\n"))
    return "\n".join(parts) + "\n"


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def png_summary(data: bytes) -> dict:
    """{width, height, colours (distinct pixel values), background (the most common one),
    ink (share of pixels that differ from it)}."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    assert ihdr, "no IHDR"
    width, height, depth, ctype, _comp, _filt, interlace = ihdr
    assert depth == 8 and interlace == 0, "only 8-bit non-interlaced PNGs: %r" % (ihdr,)
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    counts: dict[bytes, int] = {}
    for y in range(height):
        row_at = y * (stride + 1)
        ftype, line = raw[row_at], bytearray(raw[row_at + 1:row_at + 1 + stride])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                line[x] = (line[x] + _paeth(a, b, c)) & 0xFF
        for x in range(0, stride, bpp):
            px = bytes(line[x:x + bpp])
            counts[px] = counts.get(px, 0) + 1
        prev = line
    background, most = max(counts.items(), key=lambda kv: kv[1])
    total = width * height
    return {"width": width, "height": height, "colours": len(counts), "background": background.hex(),
            "ink": (total - most) / total if total else 0.0}
