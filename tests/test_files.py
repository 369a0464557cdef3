"""A shared file is written whole or not at all."""

from __future__ import annotations

import shutil

import pytest

from specdemo.files import written_whole


def test_a_write_that_fails_leaves_the_old_file_and_no_partial(tmp_path):
    path = tmp_path / "cache" / "costs.json"
    with written_whole(path) as partial:
        partial.write_text("old")
    with pytest.raises(RuntimeError), written_whole(path) as partial:
        partial.write_text("half")
        raise RuntimeError("cut off mid-write")
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["costs.json"]
    with written_whole(path) as partial:
        partial.write_text("new")
        assert path.read_text() == "old"  # nothing changes until the block ends
    assert path.read_text() == "new"


def test_a_folder_is_replaced_whole_and_a_block_that_writes_nothing_keeps_the_old_one(tmp_path):
    path = tmp_path / "converted"
    for version in ("old", "new"):
        with written_whole(path) as partial:
            partial.mkdir()
            (partial / "weights").write_text(version)
            (partial / version).write_text("")
            assert version == "old" or (path / "old").exists()  # the old folder stays until the block ends
    assert sorted(p.name for p in path.iterdir()) == ["new", "weights"]  # nothing of the old one is left
    with pytest.raises(RuntimeError), written_whole(path) as partial:
        partial.mkdir()
        (partial / "weights").write_text("half")
        raise RuntimeError("cut off mid-conversion")
    with written_whole(path) as partial:
        partial.mkdir()
        (partial / "weights").write_text("again")
        shutil.rmtree(partial)  # another process finished first: nothing to put in its place
    assert (path / "weights").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["converted"]
