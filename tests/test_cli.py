"""The CLI contract: JSON shape, greedy identity, exit code 2 with one line on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def pair_args(folders) -> list[str]:
    return ["--target", str(folders["target"]), "--draft", str(folders["draft"])]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "specdemo", *args], capture_output=True, text=True, timeout=300)


def test_generate_json_shape_and_identity(tiny_folders):
    r = run_cli(
        "generate",
        *pair_args(tiny_folders),
        "--prompt",
        "once upon a time",
        "--max-new-tokens",
        "24",
        "--gamma",
        "3",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    keys = {"prompt_ids", "baseline", "speculative", "speedup", "dtype", "first_divergence", "limited_by"}
    assert set(out) == keys
    why = out["limited_by"]  # null at ≥ 1.15×, else the term that held the run back, in words
    terms = ("acceptance", "draft cost", "verify cost", "overheads", "noise")
    assert why is None or (why["term"] in terms and why["text"])
    assert out["dtype"] == "float32" and out["first_divergence"] is None  # fp32 greedy: identical
    assert set(out["baseline"]) == {"token_ids", "text", "seconds", "compute_seconds", "tokens_per_second"}
    assert set(out["speculative"]) >= {
        "token_ids",
        "text",
        "seconds",
        "tokens_per_second",
        "acceptance_rate",
        "mean_accepted_tokens",
        "target_forwards",
        "steps",
    }
    spec = out["speculative"]
    assert spec["token_ids"] == out["baseline"]["token_ids"]  # greedy: identical
    assert 0 < len(spec["token_ids"]) <= 24
    assert spec["target_forwards"] == len(spec["steps"])
    assert [t for s in spec["steps"] for t in s["emitted"]] == spec["token_ids"]
    assert spec["mean_accepted_tokens"] == pytest.approx(len(spec["token_ids"]) / spec["target_forwards"])
    drafted = sum(len(s["drafted"]) for s in spec["steps"])
    assert spec["acceptance_rate"] == pytest.approx(sum(s["accepted"] for s in spec["steps"]) / drafted)
    assert out["speedup"] == pytest.approx(out["baseline"]["seconds"] / spec["seconds"])


def test_prompt_lookup_needs_no_draft(tiny_folders):
    r = run_cli(
        "generate",
        "--target",
        str(tiny_folders["target"]),
        "--method",
        "prompt-lookup",
        "--prompt",
        "the cat and the cat and the",
        "--max-new-tokens",
        "16",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["speculative"]["token_ids"] == out["baseline"]["token_ids"]


def test_sample_json(tiny_folders):
    r = run_cli(
        "sample",
        *pair_args(tiny_folders),
        "--prompt",
        "the dog",
        "--max-new-tokens",
        "5",
        "--samples",
        "4",
        "--temperature",
        "1",
        "--seed",
        "3",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["samples"]) == 4 and all(1 <= len(s) <= 5 for s in out["samples"])
    assert len({tuple(s) for s in out["samples"]}) > 1  # independent draws, not one repeated


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--prompt", "   "], "prompt is empty"),
        (["--prompt", "hi", "--gamma", "0"], "between 1 and 32"),
        (["--prompt", "hi", "--max-new-tokens", "-3"], "max new tokens"),
        (["--prompt", "hi", "--temperature", "nan"], "temperature"),
        (["--prompt", "hi", "--top-p", "0"], "top_p"),
        (["--prompt", "hi", "--top-k", "-2"], "top_k"),
        (["--prompt", "hi", "--target", "/no/such/folder"], "neither a local folder nor"),
        (["--prompt", "hi", "--gamma", "many"], "invalid int value"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_folders, extra, message):
    base = ["generate", "--target", str(tiny_folders["target"]), "--draft", str(tiny_folders["draft"]), "--json"]
    r = run_cli(*base, *extra)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_human_output(tiny_folders):
    r = run_cli(
        "generate",
        *pair_args(tiny_folders),
        "--prompt",
        "once upon a time",
        "--max-new-tokens",
        "10",
    )
    assert r.returncode == 0, r.stderr
    assert "speedup" in r.stdout and "acceptance" in r.stdout


def test_generate_tree_method(tiny_folders):
    r = run_cli(
        "generate",
        *pair_args(tiny_folders),
        "--prompt",
        "once upon a time",
        "--max-new-tokens",
        "20",
        "--method",
        "tree",
        "--tree-k",
        "3",
        "--tree-depth",
        "3",
        "--tree-nodes",
        "9",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    spec = out["speculative"]
    assert spec["token_ids"] == out["baseline"]["token_ids"]
    assert all(len(s["drafted"]) <= 9 for s in spec["steps"])
    assert spec["mean_accepted_tokens"] == pytest.approx(len(spec["token_ids"]) / spec["target_forwards"])


@pytest.mark.parametrize(
    ("flags", "gamma"), [([], 1), (["--method", "auto"], 6), (["--method", "auto", "--gamma", "2"], 2)]
)
def test_a_method_without_gamma_gets_its_own_else_the_presets(flags, gamma):
    """auto given the SmolLM2 preset's γ 1 could never draft two tokens: it keeps its own most."""
    from specdemo.cli import build_parser
    from specdemo.cli.common import decode_config
    from specdemo.decoding import auto

    args = build_parser().parse_args(["generate", "--preset", "smollm2-135m", "--prompt", "hi", *flags])
    assert auto.MOST == 6 and decode_config(args).gamma == gamma
