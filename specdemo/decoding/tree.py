"""Tree drafting (SpecInfer / Medusa / EAGLE-style token trees): generate → prune → rank.

* Generate: the draft expands a token tree level by level, top-k children per node, one
  draft forward per level (a tree attention mask lets every node see only its ancestors).
* Prune: at most N nodes, kept by cumulative draft probability (the product of q along
  the path), and optionally only nodes whose cumulative probability reaches a threshold.
* Rank / verify: ONE target forward scores the whole tree with a 4D tree attention mask and
  per-node position ids; then the longest path the target accepts is walked from the root.

Acceptance walks down from the root. At a node whose children are the candidates x_1..x_m:
  greedy:   move to the child equal to the target's argmax, else emit the argmax.
  sampling: SpecInfer's multi-round speculative sampling with deterministic (one-hot)
            candidates: test x_i with probability p'(x_i), where p' starts as p; on refusal set
            p' ← norm(max(0, p' − onehot(x_i))) (x_i's mass removed) and test the next one; if
            all are refused, draw from p'. Every emitted token is then exactly ~ p.
After the step both caches are cropped back to the accepted prefix; the accepted path is
re-fed (a few tokens) at the front of the next forward instead of gathering its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from specdemo.decoding import methods
from specdemo.decoding.kv import CachedLM, Stopwatch
from specdemo.decoding.sampling import SamplingConfig, align_vocab, draw, draw_uniform, make_generator, to_probs
from specdemo.decoding.steps import (
    TREE_LIMITS,
    TreeConfig,
    cache_room,
    closing_drafter,
    context_length,
    drive,
    settle,
    top_two,
    validate_request,
)
from specdemo.decoding.suffix import SuffixDrafter, shared_store, vocabulary_of
from specdemo.errors import InputError, ModelLoadError


@dataclass
class TokenTree:
    """Nodes in breadth-first order; parent −1 is the root (the last accepted token)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # cumulative draft probability of the path

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, prob: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        self.probs.append(prob)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def ancestors(self, node: int) -> list[int]:
        """The node and its ancestors, root excluded."""
        chain = []
        while node >= 0:
            chain.append(node)
            node = self.parents[node]
        return chain


def tree_mask(tree: TokenTree, nodes: range, prefix: int, pending: int, dtype, device, width=None) -> torch.Tensor:
    """Additive 4D mask [1, 1, pending + len(nodes), width ≥ prefix + nodes.stop].

    Key/value layout: ``prefix`` sequence tokens (the last ``pending`` of them fed now, the
    rest cached), then tree nodes 0..nodes.stop−1 (the earlier ones cached). Pending tokens
    are causal; a node sees the whole prefix, its ancestors and itself."""
    rows = pending + len(nodes)
    allowed = torch.zeros(rows, width or prefix + nodes.stop, dtype=torch.bool)
    for r in range(pending):
        allowed[r, : prefix - pending + r + 1] = True
    for r, n in enumerate(nodes, start=pending):
        allowed[r, :prefix] = True
        allowed[r, [prefix + a for a in tree.ancestors(n)]] = True
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def tree_positions(tree: TokenTree, nodes: range, prefix: int, pending: int, device) -> torch.Tensor:
    """Position ids: pending tokens in sequence; a node at depth d sits at prefix − 1 + d."""
    pos = list(range(prefix - pending, prefix)) + [prefix - 1 + tree.depths[n] for n in nodes]
    return torch.tensor([pos], device=device)


@torch.inference_mode()
def forward_tree(lm: CachedLM, pending: list[int], tree: TokenTree, nodes: range, prefix: int) -> torch.Tensor:
    """Feed ``pending`` sequence tokens then tree ``nodes`` in one forward: logits [len, V]."""
    ids = pending + [tree.tokens[n] for n in nodes]
    dtype = lm.model.dtype if lm.model.dtype.is_floating_point else torch.float32
    width = lm.key_width(len(ids))  # a static cache's mask spans all its positions (those past the end: hidden)
    out = lm.call(len(ids))(
        input_ids=torch.tensor([ids], device=lm.device),
        attention_mask=tree_mask(tree, nodes, prefix, len(pending), dtype, lm.device, width),
        position_ids=tree_positions(tree, nodes, prefix, len(pending), lm.device),
        **lm.kwargs(),
        use_cache=True,
    )
    lm.fed.extend(ids)
    lm.forwards += 1
    return out.logits[0]


def pending_tokens(lm: CachedLM, tokens: list[int]) -> list[int]:
    feed = lm.pending(tokens)
    if not feed:  # all cached: recompute the last position for its logits
        lm.rollback_to(len(tokens) - 1)
        feed = tokens[-1:]
    return feed


class TreeDrafter:
    def __init__(self, model, target_vocab_size: int, config: TreeConfig, like: CachedLM | None = None):
        self.lm = like.like(model) if like else CachedLM(model)  # ``like``: the target's kind of step
        self.vocab_size = target_vocab_size
        self.config = config

    def propose(self, tokens: list[int], budget: int, sampling: SamplingConfig) -> TokenTree:
        """Grow a tree of at most ``budget`` nodes (and depth ≤ budget) after ``tokens``."""
        cfg, tree, lm = self.config, TokenTree(), self.lm
        if budget <= 0:
            return tree
        pending = pending_tokens(lm, tokens)
        prefix = len(tokens)
        logits = lm.forward(pending)
        frontier = [(-1, 1.0, logits[-1])]
        for depth in range(1, min(cfg.depth, budget) + 1):
            # Generate: top-k children of every frontier node, scored by cumulative q.
            candidates = []
            for node, prob, row in frontier:
                q = to_probs(align_vocab(row[None], self.vocab_size), sampling)[0]
                values, ids = q.topk(cfg.k)
                candidates += [(prob * v, node, t) for v, t in zip(values.tolist(), ids.tolist())]
            # Prune: best cumulative probability first, within the node budget and threshold.
            candidates.sort(key=lambda c: -c[0])
            room = min(cfg.max_nodes, budget) - len(tree)
            kept = [c for c in candidates[:room] if c[0] > 0 and c[0] >= cfg.min_prob]
            if not kept:
                break
            start = len(tree)
            for prob, parent, tok in kept:
                tree.add(tok, parent, prob)
            level = range(start, len(tree))
            if depth == min(cfg.depth, budget) or len(tree) >= min(cfg.max_nodes, budget):
                break
            rows = forward_tree(lm, [], tree, level, prefix)
            frontier = [(n, tree.probs[n], rows[i]) for i, n in enumerate(level)]
        lm.rollback_to(prefix)  # the tree's nodes leave the draft cache
        return tree


class SuffixTreeDrafter:
    """Suffix decoding's tree: the continuations the suffix trees have seen after this context,
    several branches at once (``decoding/suffix.py``). Candidates are deterministic (q one-hot),
    which is what the walk below assumes."""

    def __init__(self, suffix_drafter):
        self.suffix = suffix_drafter

    def propose(self, tokens: list[int], budget: int, sampling: SamplingConfig) -> TokenTree:
        tree = TokenTree()
        if budget <= 0:
            self.suffix.follow(tokens)
            return tree
        found = self.suffix.speculate(tokens, budget, tree=True)
        kept = {-1: -1}  # the tree's node index of each kept candidate (by its index in ``found``)
        for i, (token, parent) in enumerate(list(zip(found.token_ids, found.parents))[:budget]):
            if int(parent) in kept and self.suffix.known([int(token)]):  # (not under a dropped one)
                kept[i] = len(tree.tokens)
                tree.add(int(token), kept[int(parent)], 1.0)  # q(x) = 1 for each candidate under its parent
        return tree

    def close(self) -> None:
        self.suffix.close()


@dataclass
class TreeVerdict:
    path: list[int]  # accepted node indices, root to leaf
    token: int  # the target's token after the path (correction or bonus)
    bonus: bool  # True when the path ended at a leaf (nothing left to test)
    p: list[float]  # target probability of each node's token under its parent's p
    draws: list[float]


def walk_tree(tree: TokenTree, logits: torch.Tensor, sampling: SamplingConfig, generator) -> TreeVerdict:
    """``logits`` rows: [root, node 0, node 1, …] (row i+1 predicts node i's children)."""
    probs = to_probs(logits, sampling)
    p_of = [float(probs[tree.parents[n] + 1, t]) for n, t in enumerate(tree.tokens)]
    path, draws, node = [], [], -1
    while True:
        children = tree.children(node)
        row = node + 1
        if sampling.greedy:
            best = int(logits[row].argmax())
            nxt = next((c for c in children if tree.tokens[c] == best), None)
            if nxt is None:
                return TreeVerdict(path, best, not children, p_of, draws)
        else:
            residual, nxt = probs[row].clone(), None
            for c in children:
                x = tree.tokens[c]
                # multi-round speculative sampling, one-hot candidate: keep x with prob p'(x)
                u = draw_uniform(generator)
                draws.append(u)
                if u < float(residual[x]):
                    nxt = c
                    break
                residual[x] = 0.0  # p' ← norm(max(0, p' − onehot(x)))
                total = residual.sum()
                if total <= 0:
                    break
                residual /= total
            if nxt is None:
                return TreeVerdict(path, draw(residual, generator), not children, p_of, draws)
        path.append(nxt)
        node = nxt


def check_tree_attention(model) -> None:
    """Detect a model whose attention ignores a custom 4D mask or per-node positions."""
    cache_key = "_specdemo_tree_ok"
    if getattr(model, cache_key, None) is not None:
        ok = getattr(model, cache_key)
    else:
        lm = CachedLM(model)
        prefix = [1, 2, 3]
        tree = TokenTree()
        a = tree.add(4, -1, 1.0)
        tree.add(5, -1, 1.0)
        tree.add(6, a, 1.0)
        try:
            logits = forward_tree(lm, prefix, tree, range(3), len(prefix))
            with torch.inference_mode():
                ref_a = model(input_ids=torch.tensor([prefix + [4, 6]], device=model.device)).logits[0]
                ref_b = model(input_ids=torch.tensor([prefix + [5]], device=model.device)).logits[0]
            # compare probabilities, with a tolerance that half precision can meet
            tol = 1e-4 if logits.dtype == torch.float32 else 2e-2
            pairs = ((logits[3], ref_a[3]), (logits[4], ref_b[3]), (logits[5], ref_a[4]))
            ok = all(torch.allclose(x.float().softmax(-1), y.float().softmax(-1), atol=tol) for x, y in pairs)
        except Exception:  # noqa: BLE001 - any failure here means "not supported"
            ok = False
        setattr(model, cache_key, ok)
    if not ok:
        raise ModelLoadError(
            f"{type(model).__name__} does not take a custom 4D attention mask in this transformers version, "
            "so it cannot verify a token tree: use the chain drafter (method draft) instead"
        )


def validate_tree(config: TreeConfig) -> None:
    top = TREE_LIMITS
    if not 1 <= config.k <= top.k:
        raise InputError(f"tree k (children per node) must be between 1 and {top.k}, got {config.k}", field="tree_k")
    if not 1 <= config.depth <= top.depth:
        raise InputError(f"tree depth must be between 1 and {top.depth}, got {config.depth}", field="tree_depth")
    if not 1 <= config.max_nodes <= top.max_nodes:
        raise InputError(
            f"tree nodes must be between 1 and {top.max_nodes}, got {config.max_nodes}", field="tree_nodes"
        )
    if not 0 <= config.min_prob < 1:
        raise InputError(f"tree min_prob must be in [0, 1), got {config.min_prob}", field="tree_min_prob")


def tree_steps(
    target_model,
    draft_model,
    prompt_ids: list[int],
    config,
    tree_config: TreeConfig = TreeConfig(),
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
    store=None,
) -> Iterator:
    """Speculative decoding with a token tree (the draft model's, or suffix decoding's with method
    ``suffix-tree``: ``store`` its earlier answers); yields one Step per target forward.

    Checks run at the call (not at the first step), so an unsupported model fails at once."""
    validate_request(prompt_ids, config, context_length(target_model))
    validate_tree(tree_config)
    from_suffix = not methods.get(config.method).draft_model  # suffix decoding's tree
    if draft_model is None and not from_suffix:
        raise InputError("tree drafting needs a draft model (or use suffix decoding's tree)")
    check_tree_attention(target_model)
    target = CachedLM(target_model, steps=config.steps, room=cache_room(config))
    if from_suffix:  # the node budget is γ, as for a chain
        drafter = SuffixTreeDrafter(
            SuffixDrafter(store or shared_store(vocabulary_of(target_model)), config.suffix, target.vocab_size)
        )
        nodes = config.gamma
    else:
        check_tree_attention(draft_model)
        drafter = TreeDrafter(draft_model, target.vocab_size, tree_config, like=target)
        nodes = tree_config.max_nodes
    generator = make_generator(config.sampling.seed)

    def one_step(step, tokens: list[int], budget: int) -> None:
        with Stopwatch(target.device) as t_draft:
            tree = drafter.propose(tokens, min(nodes, budget - 1), config.sampling)
        with Stopwatch(target.device) as t_verify:
            pending = pending_tokens(target, tokens)
            # ONE target forward over [pending tokens, every tree node] with the tree mask
            logits = forward_tree(target, pending, tree, range(len(tree)), len(tokens))[len(pending) - 1 :]
        with Stopwatch(target.device) as t_rest:
            verdict = walk_tree(tree, logits, config.sampling, generator)
            if config.sampling.greedy:  # the rows that chose each emitted token: root, then the path
                step.views.top2 = top_two(logits[[0] + [n + 1 for n in verdict.path]])
            target.rollback_to(len(tokens))  # crop every tree node; the path is re-fed next step
            step.drafted, step.p, step.draws = list(tree.tokens), verdict.p, verdict.draws
            # q of each node under its parent's draft distribution (probs are cumulative)
            step.q = [pr / (tree.probs[par] if par >= 0 else 1.0) for pr, par in zip(tree.probs, tree.parents)]
            step.tree_parents, step.tree_path = list(tree.parents), list(verdict.path)
            path_tokens = [tree.tokens[n] for n in verdict.path]
            settle(step, path_tokens, verdict.token, budget, eos, bonus=verdict.bonus)
            tokens.extend(step.emitted)
        step.draft_s, step.verify_s, step.rest_s = t_draft.seconds, t_verify.seconds, t_rest.seconds

    return closing_drafter(drive(one_step, prompt_ids, config, cancel), drafter)
