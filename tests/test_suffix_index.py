"""The pure-Python suffix index: the library's proposal rule on hand-made sequences, and the same
proposals as arctic-inference itself on random workloads (where the library is installed)."""

from __future__ import annotations

import random

import pytest

from specdemo.decoding.suffix_index import SuffixDecodingCache, SuffixTree


def tree_of(*seqs, depth=8) -> SuffixTree:
    tree = SuffixTree(depth)
    for i, seq in enumerate(seqs):
        tree.extend(i, seq)
    return tree


def path(tree, context, n=8, factor=4.0, min_prob=0.1):
    return tree.speculate(context, n, factor, 0.0, min_prob, False)


def test_the_most_frequent_continuation_is_proposed_with_its_estimated_probability():
    # after [1, 2]: 3 three times, 4 once
    tree = tree_of([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4, 1, 2, 3, 8])
    draft = path(tree, [7, 1, 2], n=2)
    assert draft.token_ids == [3, 9] and draft.match_len == 2
    assert draft.probs == pytest.approx([0.75, 0.75 * 2 / 3])  # 9 follows [1, 2, 3] twice in three
    assert draft.score == pytest.approx(sum(draft.probs))
    # the control: a context never seen proposes nothing
    assert path(tree, [5, 6]).token_ids == []


def test_a_proposal_stops_below_the_minimum_probability_and_at_factor_times_the_match():
    tree = tree_of([1, 2, 3, 4, 5, 6, 1, 2, 7, 8, 1, 2, 9, 9])
    assert path(tree, [0, 1, 2], min_prob=0.5).token_ids == []  # each continuation of [1, 2] is 1/3
    # the control: at 0.3 the first branch goes on, at 1/3 all along (what follows it is certain)
    assert path(tree, [0, 1, 2], min_prob=0.3).probs == pytest.approx([1 / 3] * 6)
    assert path(tree, [0, 3, 4], factor=1.0).token_ids == [5, 6]  # a 2-token match: at most 2
    assert path(tree, [0, 3, 4], factor=4.0).token_ids == [5, 6, 1, 2, 7, 8]  # the same match: to the depth, 8


def test_the_tree_proposal_keeps_several_branches_most_probable_first():
    tree = tree_of([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4, 5], depth=3)
    draft = tree.speculate([0, 1, 2], 4, 4.0, 0.0, 0.1, True)
    assert draft.token_ids == [3, 9, 4, 5] and draft.parents == [-1, 0, -1, 2]
    assert draft.probs == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert path(tree, [0, 1, 2], n=4).token_ids == [3, 9]  # the control: a chain keeps one branch


def test_the_cache_proposes_from_the_prompt_and_from_earlier_answers_fifo():
    cache = SuffixDecodingCache(max_tree_depth=8, max_cached_requests=3)  # "now" takes a place too
    for r, answer in enumerate(([10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33])):
        cache.start_request(r, [1, 2])
        cache.add_active_response(r, answer)
        cache.stop_request(r)
    cache.start_request("now", [5, 6, 7, 5, 6])
    assert cache.speculate("now", [9, 5, 6], 4, 4.0).token_ids == [7, 5, 6]  # its own prompt
    assert cache.speculate("now", [0, 20, 21], 4, 4.0).token_ids == [22, 23]  # an earlier answer
    assert cache.speculate("now", [0, 10, 11], 4, 4.0).token_ids == []  # the oldest answer was evicted
    with pytest.raises(ValueError, match="not active"):
        cache.speculate("gone", [1], 4)


def test_memory_grows_with_the_tokens_not_with_their_suffixes():
    """Path compression: a node per branch point, not one per (position, depth)."""
    rng = random.Random(0)
    tree = tree_of([rng.randrange(50_000) for _ in range(2000)], depth=24)

    def nodes(node):
        return 1 + sum(nodes(c) for c in node.children.values())

    assert nodes(tree.root) < 2 * 2000  # uncompressed, it would be ≈ 24 × 2000


def random_workload(seed: int, tree: bool):
    """(cache kind) → the proposals of a random request stream with evictions, over a small vocabulary
    (many equal counts: where the order of equal siblings and the heap decide)."""
    rng = random.Random(seed)
    vocab = rng.choice([3, 5, 20])
    script = []
    for _ in range(24):
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 20))]
        steps = []
        for _ in range(rng.randrange(1, 30)):
            knobs = dict(
                max_spec_tokens=rng.choice([1, 2, 4, 8]),
                max_spec_factor=rng.choice([0.5, 1.0, 4.0]),
                min_token_prob=rng.choice([0.0, 0.1, 0.3]),
                use_tree_spec=tree,
            )
            steps.append((knobs, [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]))
        script.append((prompt, steps))

    def run(cache_class):
        cache, out = cache_class(8, 5), []
        for r, (prompt, steps) in enumerate(script):
            cache.start_request(r, prompt)
            tokens = list(prompt)
            for knobs, new in steps:
                d = cache.speculate(r, tokens[-8:], **knobs)
                out.append((list(d.token_ids), list(d.parents), d.match_len, round(float(d.score), 5)))
                cache.add_active_response(r, new)
                tokens += new
            cache.stop_request(r)
        return out

    return run


@pytest.mark.parametrize("tree", [False, True], ids=["path", "tree"])
def test_the_same_proposals_as_arctic_inference(tree):
    library = pytest.importorskip("arctic_inference.suffix_decoding", reason="the library is the oracle here")
    for seed in range(12):
        run = random_workload(seed, tree)
        ours, theirs = run(SuffixDecodingCache), run(library.SuffixDecodingCache)
        assert ours == theirs, seed
        assert any(p[0] for p in ours)  # the control: the workloads propose something
