"""atomic_file: the whole new file or the old one, with the mode asked; nothing left behind on failure."""

from __future__ import annotations

import os

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import atomic_file


@pytest.mark.parametrize("mode,durable", [(0o644, False), (0o600, True)])
def test_write_replaces_with_the_mode_asked(tmp_path, mode, durable):
    target = tmp_path / "record.json"
    target.write_text("old")
    atomic_file.write_atomically(str(target), "new\n", mode=mode, durable=durable)
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == mode
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "record.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_file.write_atomically(str(target), None)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


def test_a_missing_folder_raises(tmp_path):
    with pytest.raises(OSError):
        atomic_file.write_atomically(str(tmp_path / "no" / "x"), "x")
