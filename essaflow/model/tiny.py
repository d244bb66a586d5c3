"""The embedded models: a tiny Llama and a character tokenizer per synthetic task, pretrained briefly by our own code.

Each is deliberately only partly competent on its task (arithmetic, Countdown, programs from examples), so
fine-tuning has room to show. A build is a pure function of its `TinyRecipe`; the recipe's hash names the
checkpoint, so it is built once and cached. Each built-in ships in `essaflow/assets/` (`tiny-base/` for
arithmetic, `tiny-countdown/`, `tiny-programs/`; 2.6 MB each) and is used when its recipe hash matches; a recipe
that matches none is built into the cache on first use (a few minutes on 2 CPU cores; docs/tasks.md).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from essaflow.data.schema import Problem
from essaflow.data.splits import key_points
from essaflow.data.synthetic import ALPHABET
from essaflow.data.synthetic_tasks import synthetic_task, task_problems
from essaflow.model.tiny_recipe import BUILTIN_MODELS, TinyRecipe
from essaflow.storage.atomic_dir import atomic_dir, committed_manifest
from essaflow.storage.cache_dir import cache_root

log = logging.getLogger(__name__)

SPECIALS = ["<pad>", "<eos>", "<unk>"]
ASSETS = Path(__file__).parents[1] / "assets"
SHIPPED = ASSETS / "tiny-base"
"""The shipped arithmetic checkpoint (`builtin:tiny`)."""
SHIPPED_DIRS = {"builtin:tiny": SHIPPED, "builtin:tiny-countdown": ASSETS / "tiny-countdown",
                "builtin:tiny-programs": ASSETS / "tiny-programs"}  # fmt: skip
"""Where each built-in model ships: `python -m essaflow.model.tiny NAME` rebuilds it there."""


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: one token per character, specials for pad/eos/unk."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(alphabet))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def tiny_config(recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        max_position_embeddings=recipe.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )


def answer_only_batch(
    tokenizer: PreTrainedTokenizerFast, prompts: list[str], answers: list[str]
) -> dict[str, torch.Tensor]:
    """Right-padded `prompt + answer + eos` with labels only on answer and eos tokens (-100 elsewhere)."""
    seqs, labels = [], []
    for p, a in zip(prompts, answers):
        p_ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        a_ids = tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p_ids + a_ids)
        labels.append([-100] * len(p_ids) + a_ids)
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    lab = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(lb)] = torch.tensor(lb)
        mask[i, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


def pretraining_corpus(recipe: TinyRecipe) -> list[Problem]:
    """The recipe's task problems, less those in its held-out region (`TinyRecipe.held_out`)."""
    corpus = task_problems(recipe.task_name or "arithmetic", recipe.corpus_size, recipe.seed, recipe.task)
    if recipe.held_out is None:
        return corpus
    return [p for p in corpus if key_points(p)[0] >= recipe.held_out]


def build_tiny_base(out_dir: Path, recipe: TinyRecipe = TinyRecipe()) -> Path:
    """Pretrain the tiny model on its task (full parameters) and save model + tokenizer atomically."""
    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    tokenizer = build_char_tokenizer(synthetic_task(recipe.task_name or "arithmetic").alphabet)
    model = LlamaForCausalLM(tiny_config(recipe, tokenizer))
    corpus = pretraining_corpus(recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=recipe.lr, total_steps=recipe.pretrain_steps)
    model.train()
    start = time.perf_counter()
    for step in range(recipe.pretrain_steps):
        batch = rng.sample(corpus, recipe.batch_size)
        out = model(**answer_only_batch(tokenizer, [p.prompt for p in batch], [p.answer for p in batch]))
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0:
            log.info("tiny-base pretrain step %d loss %.3f", step, out.loss.item())
    model.eval()
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:  # manifest.json last; an older copy is kept until this one is in place
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        meta = {
            "recipe": asdict(recipe),
            "digest": recipe.digest(),
            "build_s": round(time.perf_counter() - start, 1),
        }
        (tmp / "essaflow_recipe.json").write_text(json.dumps(meta, indent=2))
    return out_dir


def builtin_path(name: str) -> Path:
    """Directory of the built-in model `name` (`builtin:tiny`, `builtin:tiny-countdown`, ...), built if need be."""
    return tiny_base_path(BUILTIN_MODELS[name].recipe)


def cache_path(recipe: TinyRecipe) -> Path:
    """Where a recipe's checkpoint is built in the cache, named by its digest."""
    return cache_root() / f"tiny-base-{recipe.digest()}"


def shipped_path(recipe: TinyRecipe) -> Path | None:
    """The shipped checkpoint built from exactly this recipe (its digest in essaflow_recipe.json), if any."""
    for directory in SHIPPED_DIRS.values():
        meta = directory / "essaflow_recipe.json"
        if meta.exists() and json.loads(meta.read_text()).get("digest") == recipe.digest():
            return directory
    return None


def tiny_base_path(recipe: TinyRecipe = TinyRecipe()) -> Path:
    """Directory of the tiny base for this recipe: a shipped checkpoint when one matches, else built and cached."""
    shipped = shipped_path(recipe)
    if shipped is not None:
        return shipped
    target = cache_path(recipe)
    if committed_manifest(target) is None:
        log.info("building tiny base model %s (one time)", recipe.digest())
        build_tiny_base(target, recipe)
    return target


if __name__ == "__main__":  # python -m essaflow.model.tiny [NAME]: rebuild a shipped checkpoint
    import sys

    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    name = sys.argv[1] if len(sys.argv) > 1 else "builtin:tiny"
    print(build_tiny_base(SHIPPED_DIRS[name], BUILTIN_MODELS[name].recipe))
