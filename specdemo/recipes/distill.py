"""Train the SmolLM2-135M-Instruct draft by self-distillation, on a CPU.

    python -m specdemo.recipes.distill --out assets/models/smollm2-draft

Two stages, seeded, printing progress, resumable:
1. data (``distill_data.py``): the target answers ~2,400 instructions made here (topic × task
   templates and TinyStories openings), greedy and sampled, keeping its top-k logits;
2. the draft: a small Llama (hidden 256, its own layers, tied embeddings initialised from the
   target's embeddings projected onto their top principal directions) whose head scores only the
   N most frequent target tokens (``vocab.py``); it minimises the cross-entropy to the target's
   soft next-token distribution (its top-k, restricted to those N tokens) on the answer tokens.
One instruction in 25 is held out: "agreement" is how often the draft's argmax is the target's.
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from specdemo.decoding.vocab import rank_by_frequency, save_ranking, subset_ids
from specdemo.recipes.distill_data import DataConfig, generate_data
from specdemo.recipes.train import DEFAULT_DATA, cosine_lr


@dataclass
class DraftConfig:
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 768
    draft_vocab: int = 8192
    epochs: int = 6
    batch_size: int = 24
    lr: float = 3e-3
    val_every: int = 25
    seed: int = 0
    threads: int = 2


def load_rows(shards: list[Path]) -> list[dict]:
    return [row for path in shards for row in torch.load(path)["rows"] if len(row["answer"]) > 1]


def build_draft(cfg: DraftConfig, target):
    """A small Llama with the target's tokenizer; embeddings = the target's, projected by PCA."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tc = target.config
    config = LlamaConfig(
        vocab_size=tc.vocab_size,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads,
        max_position_embeddings=tc.max_position_embeddings,
        rope_parameters=tc.rope_parameters,
        rms_norm_eps=tc.rms_norm_eps,
        tie_word_embeddings=True,
        bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id,
        pad_token_id=tc.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    draft = LlamaForCausalLM(config)
    with torch.no_grad():
        # The top principal directions of the target's (tied) embedding matrix keep most of what
        # distinguishes tokens, so the draft starts with meaningful input AND output embeddings.
        emb = target.get_input_embeddings().weight.float()
        _, vectors = torch.linalg.eigh(emb.T @ emb)  # ascending eigenvalues
        draft.get_input_embeddings().weight.copy_(emb @ vectors[:, -cfg.hidden :])
    return draft


def make_batch(rows: list[dict], index: torch.Tensor, pad: int):
    """Right-padded inputs prompt + answer[:-1] and, per answer token, its position and targets."""
    inputs = [r["prompt"] + r["answer"][:-1] for r in rows]
    width = max(len(x) for x in inputs)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    rows_at, cols_at, top_ids, top_values = [], [], [], []
    for b, (r, x) in enumerate(zip(rows, inputs, strict=True)):
        ids[b, : len(x)] = torch.tensor(x)
        mask[b, : len(x)] = 1
        n = len(r["answer"])
        start = len(r["prompt"]) - 1  # the hidden state there predicts answer[0]
        rows_at += [b] * n
        cols_at += range(start, start + n)
        top_ids.append(r["top_ids"].long())
        top_values.append(r["top_values"].float())
    top_ids, top_values = torch.cat(top_ids), torch.cat(top_values)
    sub = index[top_ids]  # position in the draft's vocabulary, −1 outside it
    top_values = top_values.masked_fill(sub < 0, float("-inf"))
    soft = torch.softmax(top_values, dim=-1).nan_to_num(0.0)  # the target's p, restricted to the subset
    return ids, mask, torch.tensor(rows_at), torch.tensor(cols_at), sub.clamp_min(0), soft, sub[:, 0]


def subset_logits(draft, ids, mask, rows_at, cols_at, vocab_ids):
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state[rows_at, cols_at]
    return hidden @ draft.get_output_embeddings().weight[vocab_ids].T


@torch.no_grad()
def agreement(draft, rows, index, vocab_ids, cfg: DraftConfig) -> float:
    """How often the draft's argmax equals the target's top token (on held-out answers)."""
    draft.eval()
    hits = total = 0
    for i in range(0, len(rows), cfg.batch_size):
        ids, mask, r, c, _, _, target_top = make_batch(rows[i : i + cfg.batch_size], index, 0)
        guess = subset_logits(draft, ids, mask, r, c, vocab_ids).argmax(-1)
        hits += int((guess == target_top).sum())
        total += len(guess)
    draft.train()
    return hits / max(1, total)


def train_draft(cfg: DraftConfig, target, rows: list[dict], eos: list[int], draft=None):
    """Distil (``draft``: continue that one, a warm restart); returns (the draft at its best
    held-out agreement, ranked ids, agreement)."""
    # Hold out whole instructions (every answer to them, in any round), ~1 in val_every.
    held = [hash(tuple(r["prompt"])) % cfg.val_every == 0 for r in rows]
    train_rows = [r for r, h in zip(rows, held, strict=True) if not h]
    val_rows = [r for r, h in zip(rows, held, strict=True) if h]
    ranked = rank_by_frequency((r["prompt"] + r["answer"] for r in train_rows), target.config.vocab_size)
    vocab_ids = torch.tensor(subset_ids(ranked, cfg.draft_vocab, eos))
    index = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    index[vocab_ids] = torch.arange(len(vocab_ids))
    covered = sum(int(index[r["answer"][0]] >= 0) for r in train_rows) / len(train_rows)
    print(f"[draft] {len(train_rows)} train answers, {len(val_rows)} held out; vocabulary {len(vocab_ids)}", flush=True)
    print(f"[draft] first answer tokens inside the draft vocabulary: {covered:.1%}", flush=True)

    draft = (draft or build_draft(cfg, target)).float().train()
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = random.Random(cfg.seed)
    steps_per_epoch = (len(train_rows) + cfg.batch_size - 1) // cfg.batch_size
    total, step, start = cfg.epochs * steps_per_epoch, 0, time.time()
    best = (agreement(draft, val_rows, index, vocab_ids, cfg), copy.deepcopy(draft.state_dict()))
    print(f"[draft] epoch 0 held-out agreement {best[0]:.3f}", flush=True)
    for epoch in range(1, cfg.epochs + 1):
        order = train_rows[:]
        rng.shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            ids, mask, r, c, sub, soft, _ = make_batch(order[i : i + cfg.batch_size], index, 0)
            for group in opt.param_groups:
                group["lr"] = cosine_lr(step, total, cfg.lr, warmup=min(100, total // 10))
            log_q = F.log_softmax(subset_logits(draft, ids, mask, r, c, vocab_ids), dim=-1)
            # Cross-entropy to the target's soft distribution = forward KL up to a constant.
            loss = -(soft * log_q.gather(1, sub)).sum(-1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 20 == 0:
                print(f"[draft] step {step}/{total} loss {loss.item():.3f} ({time.time() - start:.0f}s)", flush=True)
        score = agreement(draft, val_rows, index, vocab_ids, cfg)
        print(f"[draft] epoch {epoch} held-out agreement {score:.3f} ({time.time() - start:.0f}s)", flush=True)
        if score > best[0]:
            best = (score, copy.deepcopy(draft.state_dict()))
    draft.load_state_dict(best[1])
    return draft.eval(), ranked, best[0]


def save_draft(draft, tokenizer, ranked: list[int], out: Path, source: str) -> None:
    """fp16 on disk (the engine loads it in the dtype asked for), the target's tokenizer, the ranking."""
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    draft = draft.to(torch.float16)
    draft.generation_config = GenerationConfig(
        eos_token_id=draft.config.eos_token_id, pad_token_id=draft.config.pad_token_id, do_sample=False
    )
    draft.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_ranking(out, ranked, source)


def main(argv=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdemo.models.smollm2 import resolve_target

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("assets/models/smollm2-draft"))
    parser.add_argument("--work", type=Path, default=Path("artifacts/smollm2-distill"), help="data shards (resumable)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="TinyStories text for story instructions")
    parser.add_argument("--instructions", type=int, default=DataConfig.instructions)
    parser.add_argument("--rounds", type=int, default=DataConfig.rounds)
    parser.add_argument("--resume-draft", type=Path, default=None, help="continue training this draft folder")
    parser.add_argument("--max-new-tokens", type=int, default=DataConfig.max_new_tokens)
    for f in fields(DraftConfig):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    cfg = DraftConfig(**{f.name: getattr(args, f.name) for f in fields(DraftConfig)})
    torch.set_num_threads(cfg.threads)
    start = time.time()

    target_folder = resolve_target()
    data_cfg = DataConfig(
        instructions=args.instructions, rounds=args.rounds, max_new_tokens=args.max_new_tokens, seed=cfg.seed
    )
    shards = generate_data(target_folder, args.work, data_cfg, args.data, cfg.threads)
    print(f"[data] ready ({(time.time() - start) / 60:.1f} min)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(target_folder)
    target = AutoModelForCausalLM.from_pretrained(target_folder, dtype=torch.float32)
    initial = None
    if args.resume_draft:
        initial = AutoModelForCausalLM.from_pretrained(args.resume_draft, dtype=torch.float32)
        print(f"[draft] continuing {args.resume_draft}", flush=True)
    draft, ranked, score = train_draft(cfg, target, load_rows(shards), [tokenizer.eos_token_id], initial)
    save_draft(draft, tokenizer, ranked, args.out, f"target-written answers in {args.work}")
    n = sum(p.numel() for p in draft.parameters())
    print(f"draft: {n / 1e6:.2f}M params, held-out agreement {score:.3f}, saved to {args.out}")
    print(f"recipe wall time: {(time.time() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
