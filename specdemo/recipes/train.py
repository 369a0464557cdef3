"""Train the bundled offline target/draft pair on TinyStories, on a CPU.

    python -m specdemo.recipes.train --data ../shared/data/tinystories-4mb.txt --out assets/models

(about 55 minutes on 2 CPU cores: ~2.3 s per target step, ~1.2 s per draft step)

Three stages, all seeded and printing losses:
1. a byte-level BPE tokenizer (``tokenizers``), saved so ``AutoTokenizer`` loads it;
2. the target, a ``LlamaForCausalLM`` trained with next-token cross-entropy;
3. the draft, a shallow ``LlamaForCausalLM`` initialised from the target's embeddings and
   first layers and trained by distillation: forward KL to the target's next-token
   distribution (DistillSpec, Zhou et al. 2023), so that it agrees with the target as often
   as possible.
The last ~3% of the stories are held out for validation and for the measurements in
``assets/models/MODEL_CARD.md``.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

EOS = "<|endoftext|>"
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "tinystories-4mb.txt"


@dataclass
class TrainConfig:
    vocab_size: int = 2048
    seq_len: int = 256
    batch_size: int = 32
    # target
    hidden: int = 192
    target_layers: int = 12
    heads: int = 6
    intermediate: int = 512
    # warm-up + cosine cycles "steps:peak_lr,…": the shipped target had two (a warm restart)
    target_cycles: str = "450:3e-3,400:2e-3"
    # draft
    draft_layers: int = 2
    draft_cycles: str = "500:2e-3,500:1e-3"
    val_fraction: float = 0.03
    seed: int = 0
    threads: int = 2


def split_stories(text: str) -> list[str]:
    """Stories are separated by a single newline; paragraphs inside a story by a blank line."""
    stories = re.split(r"(?<=[^\n])\n(?=[^\n])", text.strip())
    return [s.strip() for s in stories if s.strip()]


def heldout_stories(path: Path = DEFAULT_DATA, val_fraction: float = TrainConfig.val_fraction) -> list[str]:
    stories = split_stories(path.read_text(encoding="utf-8"))
    return stories[-max(1, int(len(stories) * val_fraction)) :]


def heldout_openings(n: int = 20, words: int = 8, path: Path = DEFAULT_DATA) -> list[str]:
    """The first ``words`` words of ``n`` held-out stories: prompts the models never trained on."""
    from specdemo.errors import InputError

    if not path.exists():
        raise InputError(f"the training text {path} is not here: pass --prompts FILE instead")
    return [" ".join(s.split()[:words]) for s in heldout_stories(path)[:n]]


def train_tokenizer(stories: list[str], vocab_size: int, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stories, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS)
    fast.model_max_length = 512
    fast.save_pretrained(out)
    return fast


def encode_stories(tokenizer, stories: list[str]) -> torch.Tensor:
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for enc in tokenizer.backend_tokenizer.encode_batch(stories):
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def random_batches(data: torch.Tensor, cfg: TrainConfig, generator: torch.Generator):
    while True:
        starts = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch_size,), generator=generator)
        yield torch.stack([data[s : s + cfg.seq_len + 1] for s in starts.tolist()])


def llama_config(cfg: TrainConfig, tokenizer, layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )


def cosine_lr(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def validation_loss(model, val: torch.Tensor, cfg: TrainConfig, batches: int = 8) -> float:
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    losses = []
    for _, batch in zip(range(batches), random_batches(val, cfg, gen), strict=False):
        logits = model(input_ids=batch[:, :-1]).logits
        losses.append(F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item())
    model.train()
    return sum(losses) / len(losses)


def run_steps(name, model, loss_fn, train, val, cfg, steps, lr):
    """The shared optimisation loop: AdamW, warm-up + cosine learning rate, periodic validation."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(cfg.seed + len(name))
    start = time.time()
    model.train()
    for step, batch in zip(range(steps), random_batches(train, cfg, gen), strict=False):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr)
        loss = loss_fn(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            msg = f"[{name}] step {step:4d}/{steps} loss {loss.item():.3f} ({time.time() - start:.0f}s)"
            if step % 100 == 0 or step == steps - 1:
                msg += f" val_ce {validation_loss(model, val, cfg):.3f}"
            print(msg, flush=True)
    model.eval()
    return validation_loss(model, val, cfg, batches=16)


def train_target(cfg, tokenizer, train, val, model=None):
    """Next-token cross-entropy; ``model`` continues an earlier run instead of starting afresh."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    model = model or LlamaForCausalLM(llama_config(cfg, tokenizer, cfg.target_layers))

    def loss_fn(batch):
        logits = model(input_ids=batch[:, :-1]).logits
        return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())

    return model, run_cycles("target", model, loss_fn, train, val, cfg, cfg.target_cycles)


def run_cycles(name, model, loss_fn, train, val, cfg, cycles: str) -> float:
    """Warm-restart cycles "steps:peak_lr,…" of the shared loop; the last validation CE."""
    loss = validation_loss(model, val, cfg)
    for cycle in filter(None, cycles.split(",")):
        steps, lr = cycle.split(":")
        loss = run_steps(name, model, loss_fn, train, val, cfg, int(steps), float(lr))
    return loss


def train_draft(cfg, tokenizer, target, train, val, draft=None):
    """Distil the target into a shallow draft: minimise KL(p_target || q_draft) per position."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(cfg.seed + 1)
    if draft is None:
        draft = LlamaForCausalLM(llama_config(cfg, tokenizer, cfg.draft_layers))
        # Start from the target's embeddings, first layers and final norm: the draft begins as
        # a truncated target and distillation only has to close the gap.
        state = {k: v for k, v in target.state_dict().items() if k in draft.state_dict()}
        draft.load_state_dict(state, strict=False)
    target.eval()

    def loss_fn(batch):
        inputs = batch[:, :-1]
        with torch.no_grad():
            p_log = F.log_softmax(target(input_ids=inputs).logits.float(), dim=-1)
        q_log = F.log_softmax(draft(input_ids=inputs).logits, dim=-1)
        # forward KL: sum_x p(x) (log p(x) - log q(x)), averaged over positions
        return F.kl_div(q_log.flatten(0, 1), p_log.flatten(0, 1), log_target=True, reduction="batchmean")

    return draft, run_cycles("draft", draft, loss_fn, train, val, cfg, cfg.draft_cycles)


def save_model(model, tokenizer, folder: Path):
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        do_sample=False,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=Path("assets/models"))
    parser.add_argument("--resume", type=Path, default=None, help="continue training this target folder")
    parser.add_argument("--resume-draft", type=Path, default=None, help="continue distilling this draft folder")
    for field, default in TrainConfig.__dataclass_fields__.items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default.default), default=default.default)
    args = parser.parse_args(argv)
    cfg = TrainConfig(**{f: getattr(args, f) for f in TrainConfig.__dataclass_fields__})
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)

    stories = split_stories(args.data.read_text(encoding="utf-8"))
    val_stories = heldout_stories(args.data, cfg.val_fraction)
    train_stories = stories[: len(stories) - len(val_stories)]
    print(f"{len(stories)} stories: {len(train_stories)} train, {len(val_stories)} held out", flush=True)

    initial = None
    if args.resume:
        from transformers import AutoTokenizer, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(args.resume)
        initial = LlamaForCausalLM.from_pretrained(args.resume, dtype=torch.float32)
        print(f"resuming from {args.resume}", flush=True)
    else:
        tokenizer = train_tokenizer(train_stories, cfg.vocab_size, args.out / "tokenizer-only")
    train = encode_stories(tokenizer, train_stories)
    val = encode_stories(tokenizer, val_stories)
    print(f"tokenizer: {len(tokenizer)} tokens; {len(train)} train tokens, {len(val)} val tokens", flush=True)

    target, target_val = train_target(cfg, tokenizer, train, val, initial)
    save_model(target, tokenizer, args.out / "tinystories-target")
    initial_draft = None
    if args.resume_draft:
        from transformers import LlamaForCausalLM

        initial_draft = LlamaForCausalLM.from_pretrained(args.resume_draft, dtype=torch.float32)
    draft, draft_val = train_draft(cfg, tokenizer, target, train, val, initial_draft)
    save_model(draft, tokenizer, args.out / "tinystories-draft")
    if not args.resume:
        shutil.rmtree(args.out / "tokenizer-only")
    n_t = sum(p.numel() for p in target.parameters())
    n_d = sum(p.numel() for p in draft.parameters())
    print(f"target: {n_t / 1e6:.2f}M params, val CE {target_val:.3f}")
    print(f"draft:  {n_d / 1e6:.2f}M params, val CE {draft_val:.3f}")


if __name__ == "__main__":
    main()
