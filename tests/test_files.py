"""A shared file is written whole or not at all."""

from __future__ import annotations

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
