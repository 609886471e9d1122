# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Files written so that a reader sees the old one or the whole new one, never a part: a temporary
file in the same folder, renamed over the target. Used on the host (the pre-window record, durable)
and on the control node (npu_record's result and summary files). Pure: no ansible import."""

from __future__ import annotations

import os
import tempfile


def fsync_dir(path: str) -> None:
    """fsync the folder ``path`` (its entries: a rename made durable); errors ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: str, text: str, mode: int = 0o644, durable: bool = False) -> None:
    """Write ``text`` to ``path`` with permission bits ``mode`` through a temporary file in the same
    folder (which must exist) renamed over it; ``durable``: the file and the folder are fsynced too.
    Raises OSError; the temporary file is removed on any failure."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(folder)
