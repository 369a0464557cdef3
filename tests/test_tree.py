"""Tree drafting: exact mask and positions, greedy identity, unsupported models detected."""

from __future__ import annotations

import pytest
import torch
from test_engine import PROMPTS, reference
from transformers import LlamaForCausalLM

from specdemo.decoding.engine import DecodeConfig, decode_steps, eos_ids, run_all
from specdemo.decoding.tree import TokenTree, TreeConfig, check_tree_attention, tree_mask, tree_positions
from specdemo.errors import ModelLoadError


def hand_built_tree():
    #        root
    #       /    \
    #     a(0)   b(1)
    #     /  \      \
    #  c(2)  d(3)   e(4)
    tree = TokenTree()
    a, b = tree.add(10, -1, 0.6), tree.add(11, -1, 0.3)
    tree.add(12, a, 0.4)
    tree.add(13, a, 0.1)
    tree.add(14, b, 0.2)
    return tree


def test_mask_and_positions_of_a_hand_built_tree_exactly():
    tree = hand_built_tree()
    # prefix of 4 sequence tokens, the last 2 fed now (2 cached), then all 5 nodes
    mask = tree_mask(tree, range(5), prefix=4, pending=2, dtype=torch.float32, device="cpu")
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [
        # p0 p1 p2 p3 | a  b  c  d  e
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # pending token at position 2
        [1, 1, 1, 1, 0, 0, 0, 0, 0],  # pending token at position 3 (the root)
        [1, 1, 1, 1, 1, 0, 0, 0, 0],  # a
        [1, 1, 1, 1, 0, 1, 0, 0, 0],  # b
        [1, 1, 1, 1, 1, 0, 1, 0, 0],  # c: a, c
        [1, 1, 1, 1, 1, 0, 0, 1, 0],  # d: a, d
        [1, 1, 1, 1, 0, 1, 0, 0, 1],  # e: b, e
    ]
    assert mask.min() == torch.finfo(torch.float32).min
    assert tree_positions(tree, range(5), 4, 2, "cpu").tolist() == [[2, 3, 4, 4, 5, 5, 5]]
    # one level on its own (the draft's expansion): nodes 2..4 after 2 cached nodes, nothing pending
    level = (tree_mask(tree, range(2, 5), 4, 0, torch.float32, "cpu")[0, 0] == 0).int().tolist()
    assert level == [[1, 1, 1, 1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0, 1]]
    assert tree_positions(tree, range(2, 5), 4, 0, "cpu").tolist() == [[5, 5, 5]]


@pytest.mark.parametrize("tree", [TreeConfig(), TreeConfig(k=3, depth=5, max_nodes=20), TreeConfig(k=1, depth=3)])
def test_greedy_tree_is_token_identical_to_generate(tiny_pair, tree):
    target, draft = tiny_pair
    for prompt in PROMPTS:
        cfg = DecodeConfig(max_new_tokens=40, method="tree", tree=tree)
        run = run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target)))
        assert run.token_ids == reference(target, prompt, 40)


def test_tree_emits_more_tokens_per_target_forward_than_a_chain_of_one(llama_pair):
    target, draft = llama_pair
    chain = run_all(decode_steps(target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=60, gamma=1)))
    tree = run_all(
        decode_steps(
            target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=60, method="tree", tree=TreeConfig(k=2, depth=4))
        )
    )
    assert len(tree.token_ids) / len(tree.steps) > len(chain.token_ids) / len(chain.steps)
    for step in tree.steps:  # the accepted path is a chain of parent → child links from the root
        parents = [step.tree_parents[n] for n in step.tree_path]
        assert parents == ([-1] + step.tree_path[:-1] if step.tree_path else [])


def test_node_budget_and_threshold_prune(llama_pair):
    target, draft = llama_pair
    cfg = DecodeConfig(max_new_tokens=30, method="tree", tree=TreeConfig(k=4, depth=6, max_nodes=7, min_prob=0.05))
    run = run_all(decode_steps(target, draft, PROMPTS[0], cfg))
    assert all(len(s.drafted) <= 7 for s in run.steps)
    assert run.token_ids == reference(target, PROMPTS[0], 30)


class IgnoresCustomMask(LlamaForCausalLM):
    """Stands for a model family whose attention does not take a 4D mask."""

    def forward(self, *args, attention_mask=None, position_ids=None, **kwargs):
        return super().forward(*args, **kwargs)


def test_a_model_that_ignores_4d_masks_is_detected(llama_pair):
    target, _ = llama_pair
    broken = IgnoresCustomMask(target.config).eval()
    broken.load_state_dict(target.state_dict())
    with pytest.raises(ModelLoadError, match="custom 4D attention mask"):
        check_tree_attention(broken)
    with pytest.raises(ModelLoadError, match="use the chain drafter"):
        next(decode_steps(broken, broken, [1, 2, 3], DecodeConfig(method="tree")))
    check_tree_attention(target)  # a Llama does take one
