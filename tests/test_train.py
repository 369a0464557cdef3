"""The training recipe, end to end at toy size: folders that the Auto classes load."""

from __future__ import annotations

import subprocess
import sys

from conftest import TEXT
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdemo.recipes.train import heldout_openings, split_stories


def test_recipe_writes_loadable_target_and_draft(tmp_path):
    data = tmp_path / "stories.txt"
    data.write_text("\n".join(t + "\n\nthe end." for t in TEXT * 3))
    out = tmp_path / "models"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdemo.recipes.train",
            "--data",
            str(data),
            "--out",
            str(out),
            "--vocab-size",
            "300",
            "--seq-len",
            "16",
            "--batch-size",
            "2",
            "--hidden",
            "32",
            "--target-layers",
            "2",
            "--heads",
            "2",
            "--intermediate",
            "64",
            "--target-cycles",
            "3:1e-3,2:5e-4",
            "--draft-layers",
            "1",
            "--draft-cycles",
            "2:1e-3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "[target] step    2/3" in r.stdout and "[draft] step    1/2" in r.stdout
    for name, layers in (("tinystories-target", 2), ("tinystories-draft", 1)):
        model = AutoModelForCausalLM.from_pretrained(out / name)
        assert model.config.num_hidden_layers == layers
        assert (
            AutoTokenizer.from_pretrained(out / name).get_vocab()
            == AutoTokenizer.from_pretrained(out / "tinystories-target").get_vocab()
        )
    assert not (out / "tokenizer-only").exists()


def test_stories_split_on_single_newlines_and_openings_are_held_out(tmp_path):
    text = "one day, a cat sat.\n\nit was happy.\nonce upon a time, a dog ran.\nthe end came soon."
    assert split_stories(text) == [
        "one day, a cat sat.\n\nit was happy.",
        "once upon a time, a dog ran.",
        "the end came soon.",
    ]
    data = tmp_path / "d.txt"
    data.write_text("\n".join(f"story number {i} begins here and goes on for a while." for i in range(100)))
    assert heldout_openings(2, words=3, path=data) == ["story number 97", "story number 98"]
