"""Self-distillation data: the target writes its own answers to instructions made here.

The draft must predict what THIS target says next, so the target writes the training text:
its greedy and sampled answers to a few thousand instructions built from topic × task
templates and from TinyStories openings. For every answer position we keep the target's
top-k logits (soft targets for the draft's forward-KL loss), not just the token it chose.

Shards are written one batch at a time into ``out/`` and skipped when they already exist, so
an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specdemo.files import written_whole

TOPICS = (
    "the ocean",
    "volcanoes",
    "photosynthesis",
    "the moon",
    "black holes",
    "honey bees",
    "the water cycle",
    "climate change",
    "the human heart",
    "sleep",
    "exercise",
    "healthy breakfasts",
    "bread baking",
    "coffee",
    "tea",
    "chess",
    "football",
    "the Olympic Games",
    "music theory",
    "the piano",
    "jazz",
    "painting",
    "photography",
    "poetry",
    "the Roman Empire",
    "ancient Egypt",
    "the printing press",
    "the industrial revolution",
    "democracy",
    "taxes",
    "saving money",
    "inflation",
    "starting a small business",
    "job interviews",
    "public speaking",
    "learning a new language",
    "time management",
    "friendship",
    "kindness",
    "gardening",
    "houseplants",
    "dogs",
    "cats",
    "birds",
    "recycling",
    "solar power",
    "electric cars",
    "trains",
    "airplanes",
    "bicycles",
    "the internet",
    "computers",
    "programming in Python",
    "machine learning",
    "smartphones",
    "video games",
    "social media",
    "email etiquette",
    "cooking pasta",
    "vegetables",
    "mountains",
    "deserts",
    "rainforests",
    "earthquakes",
    "the solar system",
    "mathematics",
    "fractions",
    "prime numbers",
    "geometry",
    "chemistry",
    "atoms",
    "electricity",
    "magnets",
    "the immune system",
    "vaccines",
    "first aid",
    "meditation",
    "stress",
    "happiness",
    "libraries",
    "reading books",
    "writing an essay",
    "history of writing",
    "maps",
    "travel on a budget",
    "camping",
    "the weather",
    "snow",
    "rivers",
    "bridges",
    "architecture",
    "cities",
)
TASKS = (
    "Explain {t} in simple terms.",
    "What is {t}?",
    "Give me three interesting facts about {t}.",
    "Write a short paragraph about {t}.",
    "Why is {t} important?",
    "Explain {t} to a ten-year-old.",
    "List five tips related to {t}.",
    "What are the main benefits of {t}?",
    "Write a short poem about {t}.",
    "Describe the history of {t} in a few sentences.",
    "What are common misconceptions about {t}?",
    "How would you teach someone about {t}?",
    "Summarize the key ideas of {t}.",
    "Write a short story that involves {t}.",
    "What questions do people often ask about {t}?",
    "Compare {t} with something similar and explain the differences.",
    "Give a step-by-step guide to getting started with {t}.",
    "What are the pros and cons of {t}?",
    "Write a tweet about {t}.",
    "How does {t} affect everyday life?",
    "Describe {t} in one sentence, then explain it in more detail.",
    "What should a beginner know about {t}?",
    "Write an email to a friend about {t}.",
    "What is the future of {t}?",
)
STORY_TASKS = (
    "Continue this story: {s}",
    "Write a short story that begins with: {s}",
    "Finish this children's story in a few sentences: {s}",
)


@dataclass
class DataConfig:
    instructions: int = 2400  # per round
    rounds: int = 1  # each round: another seeded draw of instructions, answered at shifted temperatures
    stories: int = 400  # of the instructions, how many continue a TinyStories opening
    max_new_tokens: int = 128
    batch_size: int = 48
    top_k: int = 20  # soft targets kept per position
    temperatures: tuple[float, ...] = (0.0, 0.7, 1.0)  # answers cycle through these (0 = greedy)
    seed: int = 0


def make_instructions(cfg: DataConfig, story_openings: list[str]) -> list[str]:
    """Topic × task instructions plus story continuations, shuffled with the seed."""
    rng = random.Random(cfg.seed)
    pairs = [task.format(t=topic) for topic in TOPICS for task in TASKS]
    rng.shuffle(pairs)
    stories = [rng.choice(STORY_TASKS).format(s=s) for s in story_openings[: cfg.stories]]
    chosen = pairs[: cfg.instructions - len(stories)] + stories
    rng.shuffle(chosen)
    return chosen


def story_openings(path: Path, n: int, words: int = 12) -> list[str]:
    """Openings of TinyStories training stories (never the held-out tail), capitalised."""
    from specdemo.recipes.train import TrainConfig, split_stories

    if not path.exists():
        return []
    stories = split_stories(path.read_text(encoding="utf-8"))
    stories = stories[: len(stories) - max(1, int(len(stories) * TrainConfig.val_fraction))]
    step = max(1, len(stories) // max(1, n))
    return [" ".join(s.split()[:words]).capitalize() for s in stories[::step][:n]]


@torch.inference_mode()
def write_shard(model, tokenizer, instructions: list[str], temperature: float, cfg: DataConfig, seed: int) -> dict:
    """Answer one batch; return prompt/answer ids and the target's top-k logits per answer token."""
    tokenizer.padding_side = "left"
    messages = [[{"role": "user", "content": text}] for text in instructions]
    enc = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True
    )
    torch.manual_seed(seed)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature > 0 else {"do_sample": False}
    out = model.generate(
        **enc,
        max_new_tokens=cfg.max_new_tokens,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=tokenizer.pad_token_id,
        **sampling,
    )
    width = enc["input_ids"].shape[1]
    logits = torch.stack(out.logits, dim=1).float()  # [batch, new, V], raw (unwarped) logits
    top_values, top_ids = logits.topk(cfg.top_k, dim=-1)
    eos = tokenizer.eos_token_id
    rows = []
    for b in range(len(instructions)):
        prompt = enc["input_ids"][b][enc["attention_mask"][b].bool()].tolist()
        answer = out.sequences[b, width:].tolist()
        n = answer.index(eos) + 1 if eos in answer else len(answer)
        rows.append(
            {
                "prompt": prompt,
                "answer": answer[:n],
                "top_ids": top_ids[b, :n].to(torch.int32),
                "top_values": top_values[b, :n].to(torch.float16),
            }
        )
    return {"temperature": temperature, "rows": rows}


def user_turn_prefix(tokenizer) -> str:
    """The chat template up to where a user's words go: fed only this, a chat model writes what a
    user would ask (Magpie, Xu et al. 2024)."""
    marker = "\x00USER\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False)
    return text[: text.index(marker)]


def worth_asking(text: str, taken: set[str]) -> bool:
    """A user turn kept as an instruction: a few words to a few sentences, with letters, not one
    already taken (the held-out prompts are in ``taken`` from the start)."""
    return 3 <= len(text.split()) <= 40 and any(c.isalpha() for c in text) and text.lower() not in taken


@torch.inference_mode()
def ask_instructions(model, tokenizer, n: int, seed: int, taken: set[str], max_tokens: int = 40) -> list[str]:
    """Sample ``n`` user turns from the target itself (T = 1, top-p 0.95); keep the finished ones
    worth asking, and add them to ``taken``. A turn still going after ``max_tokens`` is dropped."""
    prefix = tokenizer(user_turn_prefix(tokenizer), return_tensors="pt", add_special_tokens=False)["input_ids"]
    ids = prefix.repeat(n, 1)
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=1.0,
        top_p=0.95,
        top_k=0,
        max_new_tokens=max_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    kept = []
    for row in out[:, ids.shape[1] :].tolist():
        if tokenizer.eos_token_id not in row:
            continue
        text = tokenizer.decode(row[: row.index(tokenizer.eos_token_id)]).strip()
        if worth_asking(text, taken):
            taken.add(text.lower())
            kept.append(text)
    return kept


def save_shard(shard: dict, path: Path) -> int:
    """Write a shard whole or not at all (a run cut off mid-write leaves no shard to resume from);
    → its answer tokens."""
    with written_whole(path) as partial:
        torch.save(shard, partial)
    return sum(len(r["answer"]) for r in shard["rows"])


def generate_data(target_folder: str, out: Path, cfg: DataConfig, data_path: Path, threads: int = 2) -> list[Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(target_folder)
    model = AutoModelForCausalLM.from_pretrained(target_folder, dtype=torch.float32).eval()
    openings = story_openings(data_path, cfg.stories)
    jobs = []  # (shard path, instructions, temperature, seed)
    for r in range(cfg.rounds):
        instructions = make_instructions(replace(cfg, seed=cfg.seed + r), openings)
        for i in range(0, len(instructions), cfg.batch_size):
            n = i // cfg.batch_size
            name = f"shard-{n:04d}.pt" if r == 0 else f"shard-r{r}-{n:04d}.pt"
            temperature = cfg.temperatures[(n + r) % len(cfg.temperatures)]
            jobs.append((out / name, instructions[i : i + cfg.batch_size], temperature, cfg.seed * 1000 + r * 100 + n))
    start, tokens = time.time(), 0
    for k, (path, batch, temperature, seed) in enumerate(jobs):
        if path.exists():
            continue
        tokens += save_shard(write_shard(model, tokenizer, batch, temperature, cfg, seed), path)
        elapsed = time.time() - start
        print(
            f"[data] shard {k + 1}/{len(jobs)} T={temperature} {tokens} answer tokens "
            f"({tokens / elapsed:.0f} tok/s, {elapsed / 60:.1f} min)",
            flush=True,
        )
    return [path for path, *_ in jobs]


def held_out_prompts(folder: Path) -> set[str]:
    """Every prompt of the repo's prompt files, lowercased: the benches' lines (``*.txt``) and the
    tasks' prompts and user turns (``*.jsonl``). They are never asked."""
    prompts = {line.strip() for f in folder.rglob("*.txt") for line in f.read_text().splitlines()}
    for f in folder.rglob("*.jsonl"):
        for entry in map(json.loads, filter(str.strip, f.read_text().splitlines())):
            prompts.add(entry.get("prompt", "").strip())
            prompts |= {turn["content"].strip() for turn in entry.get("messages", []) if turn["role"] == "user"}
    return {p.lower() for p in prompts if p}


def generate_asked_data(
    target_folder: str, out: Path, cfg: DataConfig, shards: int, held_out: set[str], threads: int = 2
) -> list[Path]:
    """``shards`` shards of instructions the target asks itself (``ask_instructions``), answered
    three shards in four greedily (as the benches decode) and the fourth at T = 0.7. Resumable:
    existing shards are kept, and their instructions are never asked again."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(target_folder)
    model = AutoModelForCausalLM.from_pretrained(target_folder, dtype=torch.float32).eval()
    taken = set(held_out)
    paths = [out / f"shard-ask-{i:04d}.pt" for i in range(shards)]
    for path in filter(Path.exists, paths):
        taken |= {text.lower() for text in torch.load(path).get("instructions", [])}
    start, tokens = time.time(), 0
    for i, path in enumerate(paths):
        if path.exists():
            continue
        instructions: list[str] = []
        for attempt in range(6):  # about one sampled turn in two is kept
            if len(instructions) >= cfg.batch_size:
                break
            instructions += ask_instructions(
                model, tokenizer, cfg.batch_size, cfg.seed * 1000 + 10 * i + attempt, taken
            )
        temperature = 0.7 if i % 4 == 3 else 0.0
        shard = write_shard(model, tokenizer, instructions[: cfg.batch_size], temperature, cfg, cfg.seed + i)
        shard["instructions"] = instructions[: cfg.batch_size]
        tokens += save_shard(shard, path)
        elapsed = time.time() - start
        print(
            f"[ask] shard {i + 1}/{shards} T={temperature} {tokens} answer tokens ({tokens / elapsed:.0f} tok/s), "
            f"e.g. {instructions[0][:60]!r}",
            flush=True,
        )
    return paths
