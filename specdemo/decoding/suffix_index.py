"""Suffix decoding's index in pure Python: the same suffix trees and proposal rule as Snowflake's
``arctic-inference`` (``csrc/suffix_decoding/suffix_tree.cc`` and ``suffix_decoding/cache.py``,
Apache-2.0), ported so suffix decoding runs from ``pip install -r requirements.txt`` alone, on any
platform (the library is a C++ sdist that needs a compiler and five build tools).

A tree holds every suffix of each sequence, up to ``max_depth`` tokens; a node counts the suffixes
passing through it; runs of a single path are one node (path compression, O(N) memory). A proposal
matches the context's tail (1 … len−1 tokens), then follows the most frequent child while the
continuation's estimated probability stays ≥ ``min_token_prob``; the best-scored match wins
(score = the sum of the proposed tokens' probabilities, ties to the longer match). Children of
equal count keep the library's order, probabilities are float32 and the tree proposal pops the same
binary heap as there, so both propose the same tokens (tests/test_suffix_index.py compares them
where the library is installed).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

f32 = np.float32


@dataclass
class SuffixDecodingDraft:
    """What ``speculate`` returns (the library's dataclass): ``parents[i]`` indexes the token
    ``token_ids[i]`` follows (−1: the context)."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class Node:
    __slots__ = ("count", "token", "length", "ref_seq", "ref_idx", "endpoints", "parent", "children", "groups")

    def __init__(self, count=0, token=0, length=0, ref_seq=0, ref_idx=-1, parent=None):
        self.count = count  # suffixes that end at or pass through this node
        self.token = token  # the first of its ``length`` tokens, which are seqs[ref_seq][ref_idx:…]
        self.length = length
        self.ref_seq = ref_seq
        self.ref_idx = ref_idx
        self.endpoints: dict[int, int] = {}  # seq → end index of its suffix that ends here
        self.parent = parent
        self.children: dict[int, Node] = {}
        # the children by count, each group in the library's sibling order (its linked lists)
        self.groups: dict[int, list[Node]] = {}

    def first_child(self) -> Node:
        return self.groups[max(self.groups)][0]

    def ordered_children(self):
        for count in sorted(self.groups, reverse=True):
            yield from self.groups[count]

    def place(self, child: Node, first: bool) -> None:
        group = self.groups.setdefault(child.count, [])
        group.insert(0, child) if first else group.append(child)

    def unplace(self, child: Node, count: int) -> bool:
        """Take ``child`` out of its group; was it the group's first?"""
        group = self.groups[count]
        first = group[0] is child
        group.remove(child)
        if not group:
            del self.groups[count]
        return first

    def swap(self, old: Node, new: Node) -> None:
        """``new`` takes ``old``'s place among the children (same count)."""
        group = self.groups[old.count]
        group[next(i for i, n in enumerate(group) if n is old)] = new

    def add_to_count(self, child: Node, delta: int) -> None:
        """The library's increment puts a child first among its new equal-count group when it led
        its old one, else last; a decrement puts it first."""
        first = self.unplace(child, child.count)
        child.count += delta
        self.place(child, first or delta < 0)


class SuffixTree:
    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = Node()
        self.seqs: dict[int, list[int]] = {}
        self.active: dict[int, deque[Node]] = {}  # per sequence: the nodes its last suffixes end at

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def append(self, seq_id: int, token: int) -> None:
        """Extend every active suffix of ``seq_id`` (the last ``max_depth``) by ``token``."""
        root = self.root
        seq = self.seqs.setdefault(seq_id, [])
        active = self.active.setdefault(seq_id, deque())
        active.append(root)
        root.endpoints[seq_id] = len(seq)
        root.count += 1
        if len(active) > self.max_depth:
            active.popleft()
        seq.append(token)
        end = len(seq)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                if node.count == 1 and node is not root:  # a leaf only this suffix reaches: lengthen it
                    node.length += 1
                    node.endpoints[seq_id] += 1
                else:  # a new child, last among its siblings
                    new = Node(1, token, 1, seq_id, end - 1, node)
                    new.endpoints[seq_id] = end
                    node.children[token] = new
                    node.place(new, first=False)
                    del node.endpoints[seq_id]
                    active[i] = new
            elif node.count == child.count + 1 and node is not root:
                # every other suffix through this node goes on to ``child``: this one now does too
                if child.length == 1:  # fuse the node into its child
                    child.count += 1
                    child.token, child.length = node.token, node.length + 1
                    child.ref_seq, child.ref_idx = seq_id, end - child.length
                    child.endpoints[seq_id] = end
                    child.parent = node.parent
                    node.parent.swap(node, child)
                    node.parent.children[child.token] = child
                    active[i] = child
                else:  # the node grows by one token into its child
                    node.length += 1
                    node.endpoints[seq_id] += 1
                    node.ref_seq, node.ref_idx = seq_id, end - node.length
                    self.shorten(child)
                    if child.token != token:
                        del node.children[token]
                        node.children[child.token] = child
            elif child.length == 1:  # step into the child
                del node.endpoints[seq_id]
                child.endpoints[seq_id] = end
                node.add_to_count(child, 1)
                active[i] = child
            else:  # split the child after its first token
                new = Node(child.count, token, 1, seq_id, end - 1, node)
                node.swap(child, new)
                node.children[token] = new
                self.shorten(child)
                new.children[child.token] = child
                new.place(child, first=True)
                child.parent = new
                del node.endpoints[seq_id]
                new.endpoints[seq_id] = end
                node.add_to_count(new, 1)
                active[i] = new

    def shorten(self, node: Node) -> None:
        """Drop a node's first token (its parent took it)."""
        node.length -= 1
        node.ref_idx += 1
        node.token = self.seqs[node.ref_seq][node.ref_idx]

    def remove(self, seq_id: int) -> None:
        """Forget a sequence: every suffix of it leaves the counts; nodes only it reached go."""
        seq = self.seqs[seq_id]
        for start in range(len(seq)):
            node = self.root
            node.count -= 1
            idx, path = start, []
            while idx < len(seq):
                child = node.children.get(seq[idx])
                if child is None:
                    break
                if child.count == 1:
                    del node.children[seq[idx]]
                    node.unplace(child, 1)
                    break
                node.add_to_count(child, -1)
                child.endpoints.pop(seq_id, None)
                idx += child.length
                node = child
                path.append(node)
            if node is not self.root and len(node.children) == 1:  # merge with an only child of equal count
                child = next(iter(node.children.values()))
                if node.count == child.count:
                    child.token = node.token
                    child.length += node.length
                    child.ref_idx -= node.length
                    child.parent = node.parent
                    node.parent.swap(node, child)
                    node.parent.children[child.token] = child
                    path[-1] = node = child
            self.rehome(seq_id, node, path)
        del self.seqs[seq_id]
        self.active.pop(seq_id, None)

    def rehome(self, seq_id: int, node: Node, path: list[Node]) -> None:
        """Point the path's nodes that read their tokens from ``seq_id`` at another sequence
        holding the same tokens (found through a leaf's endpoint)."""
        leaf, distance = node, 0
        while leaf.children:
            leaf = next(iter(leaf.children.values()))
            distance += leaf.length
        if not leaf.endpoints or seq_id in leaf.endpoints:
            return  # visited again later in this removal
        ref_seq, ref_end = next(iter(leaf.endpoints.items()))
        ref_idx = ref_end - distance
        for n in reversed(path):
            ref_idx -= n.length
            if n.ref_seq == seq_id:
                n.ref_seq, n.ref_idx = ref_seq, ref_idx

    def match(self, context: Sequence[int]) -> tuple[Node | None, int]:
        """The node and offset where ``context`` ends as a path from the root (None: not seen)."""
        node, idx = self.root, 0
        for token in context:
            if idx >= node.length:
                node = node.children.get(token)
                if node is None:
                    return None, -1
                idx = 0
            if self.seqs[node.ref_seq][node.ref_idx + idx] != token:
                return None, -1
            idx += 1
        return node, idx

    def speculate(self, context, max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec):
        best = SuffixDecodingDraft(score=f32(0))
        for match_len in range(1, len(context)):
            node, idx = self.match(context[len(context) - match_len :])
            if node is None:
                break
            # a proposal at most factor × match + offset long: a short match is a weak hint
            limit = int(float(f32(match_len) * f32(max_spec_factor) + f32(max_spec_offset)) + 1e-6)
            n = max(min(max_spec_tokens, limit), 0)
            walk = self.tree_from if use_tree_spec else self.path_from
            draft = walk(node, idx, n, f32(min_token_prob))
            if draft.score >= best.score:
                best = draft
                best.match_len = match_len
        return best

    def path_from(self, node: Node, idx: int, limit: int, min_prob) -> SuffixDecodingDraft:
        """The most frequent continuation, while its probability (the product of child/parent
        counts along it) stays ≥ ``min_prob``."""
        out = SuffixDecodingDraft(score=f32(0))
        prob = f32(1)
        while len(out.token_ids) < limit and prob >= min_prob:
            if idx < node.length:
                out.parents.append(len(out.token_ids) - 1)
                out.token_ids.append(self.seqs[node.ref_seq][node.ref_idx + idx])
                out.probs.append(float(prob))
                out.score += prob
                idx += 1
            else:
                if not node.children:
                    break
                child = node.first_child()
                prob *= f32(child.count) / f32(node.count)
                node, idx = child, 0
        return out

    def tree_from(self, node: Node, idx: int, limit: int, min_prob) -> SuffixDecodingDraft:
        """Up to ``limit`` continuations, most probable first (several branches)."""
        out = SuffixDecodingDraft(score=f32(0))
        heap = [(f32(1), node, idx, -1)]
        while len(out.token_ids) < limit and heap:
            prob, node, idx, parent = pop_heap(heap)
            if idx < node.length:
                out.token_ids.append(self.seqs[node.ref_seq][node.ref_idx + idx])
                out.parents.append(parent)
                out.probs.append(float(prob))
                out.score += prob
                push_heap(heap, (prob, node, idx + 1, len(out.token_ids) - 1))
            else:
                for child in node.ordered_children():
                    p = prob * f32(child.count) / f32(node.count)
                    if p < min_prob:
                        break
                    push_heap(heap, (p, child, 0, parent))
        return out


# std::priority_queue's binary heap (libstdc++'s push_heap / pop_heap, largest first): which of two
# equally probable branches comes first is decided as there.
def push_heap(heap: list, item) -> None:
    heap.append(item)
    sift_up(heap, len(heap) - 1, item)


def sift_up(heap: list, hole: int, item) -> None:
    parent = (hole - 1) // 2
    while hole > 0 and heap[parent][0] < item[0]:
        heap[hole] = heap[parent]
        hole, parent = parent, (parent - 1) // 2
    heap[hole] = item


def pop_heap(heap: list):
    top, last = heap[0], heap.pop()
    n = len(heap)
    if n:
        hole = child = 0
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if heap[child][0] < heap[child - 1][0]:
                child -= 1
            heap[hole] = heap[child]
            hole = child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            heap[hole] = heap[child - 1]
            hole = child - 1
        sift_up(heap, hole, last)
    return top


class SuffixDecodingCache:
    """The library's cache: one tree per active request over its prompt and answer so far, one
    global tree over the answers of the last ``max_cached_requests`` requests (FIFO)."""

    def __init__(self, max_tree_depth: int = 64, max_cached_requests: int = -1):
        self.max_tree_depth = max_tree_depth
        self.max_cached_requests = max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.local_trees: dict[Hashable, SuffixTree] = {}
        self.seq_of: dict[Hashable, int] = {}  # request → its sequence in the global tree (FIFO order)
        self.next_seq = itertools.count()

    def start_request(self, req_id: Hashable, prompt_token_ids: Sequence[int]) -> None:
        if req_id in self.local_trees:
            raise ValueError(f"Request '{req_id}' is already active")
        self.local_trees[req_id] = tree = SuffixTree(self.max_tree_depth)
        tree.extend(0, prompt_token_ids)
        if self.max_cached_requests != 0:
            if req_id in self.seq_of:
                self.evict_cached_response(req_id)
            self.seq_of[req_id] = seq = next(self.next_seq)
            while 0 <= self.max_cached_requests < len(self.seq_of):
                self.evict_cached_response(next(r for r, s in self.seq_of.items() if s != seq))

    def stop_request(self, req_id: Hashable) -> None:
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        del self.local_trees[req_id]

    def add_active_response(self, req_id: Hashable, token_ids: Sequence[int]) -> None:
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        self.local_trees[req_id].extend(0, token_ids)
        if req_id in self.seq_of:
            self.global_tree.extend(self.seq_of[req_id], token_ids)

    def evict_cached_response(self, req_id: Hashable) -> None:
        seq = self.seq_of.pop(req_id)
        if seq in self.global_tree.seqs:
            self.global_tree.remove(seq)

    def speculate(
        self,
        req_id: Hashable,
        context: Sequence[int],
        max_spec_tokens: int | None = None,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
        use_tree_spec: bool = False,
    ) -> SuffixDecodingDraft:
        """The better-scored proposal of the request's own tree and the earlier answers' tree."""
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        context = [int(t) for t in context][-self.max_tree_depth :]
        limit = self.max_tree_depth if max_spec_tokens is None else max_spec_tokens
        args = (context, limit, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)
        own = self.local_trees[req_id].speculate(*args)
        earlier = self.global_tree.speculate(*args)
        best = own if own.score >= earlier.score else earlier
        best.score = float(best.score)
        return best
