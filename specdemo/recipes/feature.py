"""Train a feature drafter (``decoding/feature.py``) for SmolLM2-135M-Instruct on a CPU.

    python -m specdemo.recipes.feature --data ~/.cache/specdemo/data/feature-v1 --out ~/.cache/specdemo/smollm2-feature

1. data: target-written answers in shards (``distill_data.py``, resumable): ``--generate ROUNDS``
   first answers rounds of the topic × task instructions, ``--ask SHARDS`` shards of instructions
   the target asks itself (Magpie: fed only the chat template up to the user turn, it writes what a
   user would ask; answered mostly greedily, as the benches decode);
2. features: ONE parallel target forward over each stored sequence gives its hidden states at the
   head's layers (fp16: 3.5 KB a token) and the target's own next-token distribution at every
   position (from the final hidden state, over the draft's N tokens), cached per shard under
   ``--work`` (recomputing them each epoch would cost more than the epoch);
3. the head: initialised from the target (its last decoder layer, its head's N rows, g = the high
   feature), trained to match the target's next-token distribution (soft cross-entropy on answer
   positions) at draft position 1 (the target's features) and, "training-time test", at position 2
   (the head's own h in place of the feature it will not have yet, attending to position-1 keys as
   it does when drafting), loss CE_1 + 0.8 · CE_2. The answers to one prompt in 25 are held out (by
   prompt: the data answers each prompt several times, at several temperatures): "agreement" is how
   often the head's argmax is the target's next token there.
Checkpoints after every epoch under ``--work``; ``--resume`` continues from the last one, and
``--warm-start FOLDER`` starts from a trained head (a fresh schedule, for more data, or ``--depth 2``
over a one-layer head: the new layer starts as a no-op, see ``deepen``).
"""

from __future__ import annotations

import argparse
import random
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from specdemo.decoding.feature import FeatureHead, config_for, default_layers, load_feature_head, save_feature_head
from specdemo.decoding.vocab import load_ranking, subset_ids


@dataclass
class FeatureTrainConfig:
    draft_vocab: int = 8192
    epochs: int = 4
    batch_size: int = 8  # sequences per optimiser step
    lr: float = 1e-3
    ttt_weight: float = 0.8  # weight of the position-2 ("training-time test") loss; 0 = position 1 only
    depth: int = 1  # decoder layers in the head
    max_rows: int = 0  # 0 = every stored answer
    seed: int = 0
    threads: int = 2


def answer_rows(path: Path) -> list[dict]:
    return [r for r in torch.load(path)["rows"] if len(r["answer"]) > 2]


def load_items(folder: Path, work: Path, target, layers, draft_ids: torch.Tensor, limit: int = 0) -> list[dict]:
    """Every shard's sequences with their target features, extracted once per shard and cached in
    fp16 under ``work/features/`` (the data job keeps adding shards: only new ones are extracted)."""
    cache = work / "features"
    cache.mkdir(parents=True, exist_ok=True)
    items: list[dict] = []
    for path in sorted(folder.glob("shard-*.pt")):
        cached = cache / path.name
        if cached.exists():
            items += torch.load(cached)
        else:
            new = extract(target, answer_rows(path), layers, draft_ids)
            torch.save(new, cached)
            items += new
        if limit and len(items) >= limit:
            return items[:limit]
    return items


@torch.inference_mode()
def extract(target, rows: list[dict], layers: tuple[int, ...], draft_ids: torch.Tensor, batch: int = 8) -> list[dict]:
    """Per sequence: tokens, answer start, target features [T, 3H] (fp16) and the target's next-token
    distribution over the draft ids [T, N] as top-32 (ids, probs) to keep memory small."""
    head_rows = target.get_output_embeddings().weight[draft_ids]
    out, start = [], time.time()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["prompt"]) + len(rows[i]["answer"]))
    for b in range(0, len(order), batch):
        chunk = [rows[i] for i in order[b : b + batch]]
        seqs = [r["prompt"] + r["answer"] for r in chunk]
        width = max(map(len, seqs))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
        hs = target(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        feats = torch.cat([hs[i] for i in layers], -1)
        logits = hs[-1] @ head_rows.T  # the target's logits over the draft ids (final hidden is normed)
        top = logits.float().softmax(-1).topk(32, dim=-1)
        for i, (r, s) in enumerate(zip(chunk, seqs, strict=True)):
            n = len(s)
            out.append(
                {
                    "ids": s,
                    "answer_start": len(r["prompt"]),
                    "feats": feats[i, :n].half(),
                    "top_ids": top.indices[i, :n].to(torch.int16),
                    "top_p": top.values[i, :n].half(),
                }
            )
        done = b + len(chunk)
        if (b // batch) % 20 == 0:
            tokens = sum(len(o["ids"]) for o in out)
            print(f"[features] {done}/{len(rows)} sequences, {tokens / (time.time() - start):.0f} tok/s", flush=True)
    return out


def copy_target_layer(block, layer) -> None:
    """One of the head's decoder layers ← a decoder layer of the target (same shapes)."""
    pairs = {
        block.q: layer.self_attn.q_proj,
        block.k: layer.self_attn.k_proj,
        block.v: layer.self_attn.v_proj,
        block.o: layer.self_attn.o_proj,
        block.gate: layer.mlp.gate_proj,
        block.up: layer.mlp.up_proj,
        block.down: layer.mlp.down_proj,
    }
    for mine, theirs in pairs.items():
        mine.weight.copy_(theirs.weight)
    block.attn_norm.weight.copy_(layer.input_layernorm.weight)
    block.mlp_norm.weight.copy_(layer.post_attention_layernorm.weight)


@torch.no_grad()
def init_from_target(head: FeatureHead, target, draft_ids: torch.Tensor) -> None:
    """The target's last decoder layers and its head's N rows; g = the high feature; x = g."""
    h = head.cfg.hidden
    for block, layer in zip(head.blocks, target.model.layers[-len(head.blocks) :], strict=True):
        copy_target_layer(block, layer)
    head.norm.weight.copy_(target.model.norm.weight)
    head.head.weight.copy_(target.get_output_embeddings().weight[draft_ids])
    head.fuse.weight.zero_()
    head.fuse.weight[:, -h:].copy_(torch.eye(h))
    head.mix.weight.zero_()
    head.mix.weight[:, h:].copy_(torch.eye(h))


@torch.no_grad()
def deepen(head: FeatureHead, trained: FeatureHead, target) -> None:
    """A deeper head that starts as ``trained`` computes: its layers first, then each new layer a
    copy of the target's last one with its two output projections zeroed, so x + attn(x) + mlp(x)
    adds nothing until training finds a use for it (the capacity probe starts from the smaller
    head's α, not from scratch)."""
    kept = len(trained.blocks)
    state = {k: v for k, v in trained.state_dict().items() if not k.startswith("blocks.")}
    head.load_state_dict(state, strict=False)
    for i, block in enumerate(head.blocks):
        if i < kept:
            block.load_state_dict(trained.blocks[i].state_dict())
        else:
            copy_target_layer(block, target.model.layers[-1])
            block.o.weight.zero_()
            block.down.weight.zero_()


def soft_targets(items: list[dict], width: int, n_vocab: int) -> torch.Tensor:
    """[B, width, N] target probabilities (top-32, the rest 0) at positions 1..width."""
    out = torch.zeros(len(items), width, n_vocab)
    for b, it in enumerate(items):
        n = min(width, len(it["ids"]) - 1)
        out[b, :n].scatter_(-1, it["top_ids"][1 : n + 1].long(), it["top_p"][1 : n + 1].float())
    return out


def parallel_logits(head: FeatureHead, embeds, feats, second: bool = True):
    """Every position's draft logits at once, as drafting computes them one by one: position 1 from
    the target's features (causal), and, with ``second``, the second draft at every j (input
    (h1_{j−1}, token j), each layer attending to its position-1 keys of positions < j and to its own).
    embeds, feats: [B, W, H], [B, W, 3H] for positions 1..W → ([B, W, N], [B, W, N] | None)."""
    width = embeds.shape[1]
    positions = torch.arange(1, width + 1, device=embeds.device)
    h1, keys = head.mix(torch.cat([embeds, head.fuse(feats)], -1)), []
    causal = torch.ones(width, width, dtype=torch.bool, device=embeds.device).tril()
    for block in head.blocks:
        q1, k1, v1 = block.project(h1, positions)
        keys.append((k1, v1))
        h1 = block.finish(h1, q1, k1, v1, causal)
    logits1 = head.head(head.norm(h1))
    if not second:
        return logits1, None
    own = torch.cat([torch.zeros_like(h1[:, :1]), h1[:, :-1]], 1)
    h2 = head.mix(torch.cat([embeds, own], -1))
    earlier = torch.ones(width, width, dtype=torch.bool, device=embeds.device).tril(-1)
    mask = torch.cat([earlier, torch.eye(width, dtype=torch.bool, device=embeds.device)], 1)
    for block, (k1, v1) in zip(head.blocks, keys, strict=True):
        q2, k2, v2 = block.project(h2, positions)
        h2 = block.finish(h2, q2, torch.cat([k1, k2], 2), torch.cat([v1, v2], 2), mask)
    return logits1, head.head(head.norm(h2))


def losses(head: FeatureHead, embed, items: list[dict], ttt_weight: float):
    width = max(len(it["ids"]) for it in items) - 1  # head positions 1..T−1
    b = len(items)
    ids = torch.zeros(b, width, dtype=torch.long)
    feats = torch.zeros(b, width, items[0]["feats"].shape[-1])
    weight = torch.zeros(b, width)
    for i, it in enumerate(items):
        n = len(it["ids"]) - 1
        ids[i, :n] = torch.tensor(it["ids"][1:])
        feats[i, :n] = it["feats"][:n].float()
        weight[i, max(0, it["answer_start"] - 1) : n] = 1.0  # positions predicting answer tokens
    target = soft_targets(items, width, head.head.weight.shape[0])
    logits1, logits2 = parallel_logits(head, embed(ids), feats, ttt_weight > 0)
    ce1 = -(target * logits1.log_softmax(-1)).sum(-1)
    loss = (ce1 * weight).sum() / weight.sum()
    agree = ((logits1.argmax(-1) == target.argmax(-1)).float() * weight).sum() / weight.sum()
    if logits2 is not None:
        # the second draft at j predicts token j+1 from (h1_{j−1}, token j): the same target row as CE₁
        w2 = weight.clone()
        w2[:, 0] = 0
        ce2 = -(target * logits2.log_softmax(-1)).sum(-1)
        loss = loss + ttt_weight * (ce2 * w2).sum() / w2.sum().clamp_min(1)
    return loss, float(agree)


def is_held_out(item: dict) -> bool:
    """One prompt in 25, by a stable hash of its tokens: all its answers on the same side."""
    prompt = item["ids"][: item["answer_start"]]
    return zlib.crc32(torch.tensor(prompt, dtype=torch.int32).numpy().tobytes()) % 25 == 0


@torch.no_grad()
def held_out_agreement(head: FeatureHead, embed, items: list[dict]) -> float:
    scores = [losses(head, embed, items[i : i + 8], 0.0)[1] for i in range(0, len(items), 8)]
    return sum(scores) / max(1, len(scores))


def train(head: FeatureHead, embed, items: list[dict], cfg: FeatureTrainConfig, work: Path, resume: bool) -> float:
    rng = random.Random(cfg.seed)
    held = [it for it in items if is_held_out(it)]
    train_items = [it for it in items if not is_held_out(it)]
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    total = cfg.epochs * (len(train_items) // cfg.batch_size)
    step, first_epoch = 0, 0
    ckpt = work / "feature-head.ckpt"
    if resume and ckpt.exists():
        state = torch.load(ckpt)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        first_epoch, step = state["epoch"] + 1, state["step"]
        print(f"[train] resumed after epoch {state['epoch']}", flush=True)
    best = held_out_agreement(head, embed, held)
    best_state = {k: v.clone() for k, v in head.state_dict().items()}
    print(f"[train] agreement before: {best:.3f}", flush=True)
    start = time.time()
    for epoch in range(first_epoch, cfg.epochs):
        # batches of similar lengths (little padding), in a shuffled order
        ordered = sorted(train_items, key=lambda it: len(it["ids"]))
        batches = [ordered[i : i + cfg.batch_size] for i in range(0, len(ordered), cfg.batch_size)]
        rng.shuffle(batches)
        for batch in batches:
            lr = cfg.lr * 0.5 * (1 + torch.cos(torch.tensor(3.14159 * min(1.0, step / max(1, total)))).item())
            for g in opt.param_groups:
                g["lr"] = max(lr, cfg.lr * 0.05)
            loss, agree = losses(head, embed, batch, cfg.ttt_weight)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if step % 50 == 0:
                print(
                    f"[train] epoch {epoch} step {step}/{total} loss {loss.item():.3f} agree {agree:.3f} "
                    f"({(time.time() - start) / 60:.1f} min)",
                    flush=True,
                )
        score = held_out_agreement(head, embed, held)
        print(f"[train] epoch {epoch} held-out agreement {score:.3f}", flush=True)
        torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "step": step}, ckpt)
        if score > best:
            best, best_state = score, {k: v.clone() for k, v in head.state_dict().items()}
    head.load_state_dict(best_state)  # the epoch that did best on the held-out answers
    return best


def generate(args, threads: int) -> None:
    """The data options: the target writes its answers into ``args.data`` before training."""
    from specdemo.models import smollm2
    from specdemo.recipes.distill_data import DataConfig, generate_asked_data, generate_data, held_out_prompts
    from specdemo.recipes.train import DEFAULT_DATA

    if args.generate:
        generate_data(
            smollm2.resolve_target(), args.data, DataConfig(rounds=args.generate, seed=1), DEFAULT_DATA, threads
        )
    if args.ask:
        prompts = Path(__file__).resolve().parents[2] / "assets" / "prompts"
        cfg = DataConfig(batch_size=32, seed=9)
        generate_asked_data(smollm2.resolve_target(), args.data, cfg, args.ask, held_out_prompts(prompts), threads)


def main(argv=None):
    from transformers import AutoModelForCausalLM

    from specdemo.models import SMOLLM2_DRAFT, smollm2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=smollm2.cache_dir() / "data" / "feature-v1")
    parser.add_argument("--out", type=Path, default=smollm2.cache_dir() / "smollm2-feature")
    parser.add_argument("--work", type=Path, default=smollm2.cache_dir() / "feature-work")
    parser.add_argument("--resume", action="store_true", help="continue this run from its last checkpoint")
    parser.add_argument("--warm-start", type=Path, default=None, help="start from a trained head's folder")
    parser.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="first answer ROUNDS rounds of the topic × task instructions into --data (resumable)",
    )
    parser.add_argument(
        "--ask",
        type=int,
        default=0,
        metavar="SHARDS",
        help="first write SHARDS shards of instructions the target asks itself into --data (resumable)",
    )
    for name, value in vars(FeatureTrainConfig()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    cfg = FeatureTrainConfig(**{k: getattr(args, k) for k in vars(FeatureTrainConfig())})
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    generate(args, cfg.threads)
    target = AutoModelForCausalLM.from_pretrained(smollm2.resolve_target(), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    vocab = target.get_output_embeddings().weight.shape[0]
    eos = [target.config.eos_token_id] if isinstance(target.config.eos_token_id, int) else []
    draft_ids = subset_ids(load_ranking(SMOLLM2_DRAFT, vocab), cfg.draft_vocab, eos)
    layers = default_layers(target.config.num_hidden_layers)
    # fp16 features cached per shard: recomputing them every epoch would cost more than an epoch
    items = load_items(args.data, args.work, target, layers, torch.tensor(draft_ids), cfg.max_rows)
    answer_tokens = sum(len(it["ids"]) - it["answer_start"] for it in items)
    print(f"[data] {len(items)} answers, {answer_tokens} answer tokens from {args.data}", flush=True)
    head = FeatureHead(config_for(target, layers, draft_ids, cfg.depth))
    if args.warm_start:  # continue from a trained head (more data since): its weights, a fresh schedule
        deepen(head, load_feature_head(str(args.warm_start)), target)
        print(f"[train] warm start from {args.warm_start}", flush=True)
    else:
        init_from_target(head, target, torch.tensor(draft_ids))
    started = time.time()
    score = train(head, target.get_input_embeddings(), items, cfg, args.work, args.resume)
    minutes = (time.time() - started) / 60
    card = (
        "# SmolLM2-135M-Instruct feature drafter (EAGLE-3 style)\n\n"
        f"Reads the target's hidden states at layers {layers} (indices into `hidden_states`); {cfg.depth}\n"
        f"decoder layer(s); scores the {cfg.draft_vocab} most frequent target tokens. Trained by\n"
        f"`python -m specdemo.recipes.feature` on {len(items)} target-written answers ({answer_tokens} answer\n"
        f"tokens), {cfg.epochs} epochs, {minutes:.0f} min on {cfg.threads} CPU threads. Held-out agreement with\n"
        f"the target's next token (draft position 1): {score:.3f}.\n"
    )
    if args.warm_start:
        card += (
            f"\nContinued from the head in `{args.warm_start}` (a fresh schedule over all the data): its\n"
            "held-out answers are not all new to it, so the agreement above is optimistic; the bench is the test.\n"
        )
    save_feature_head(head.eval(), args.out, card)
    print(f"feature drafter: held-out agreement {score:.3f}, saved to {args.out}", flush=True)


if __name__ == "__main__":
    main()
