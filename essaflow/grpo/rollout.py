"""Rollouts for GRPO: which prompts a step uses, G samples per prompt, their rewards, and token log-probs.

The step computes the advantages from these rewards (`step.train_step`, `advantages.py`).

Two properties make distributed training a pure config change and resumption exact:

* **Stateless prompt order.** The prompts of step s are a function of (seed, s) only: slot j of step s reads
  train problem `perm_e[(s * P + j) mod n]`, perm_e a seeded permutation per epoch e. Worker w of W owns slots
  j = w, w + W, w + 2W, ... so a group never spans workers, and global mini-batch m is the same set of slots
  whatever W is.
* **Batch-invariant sampling.** Tokens are drawn by Gumbel-max with noise from a counter-based hash of
  (seed, step, slot, sample, round, position, token id), not from torch's global RNG. A completion therefore
  does not depend on which other sequences share its batch or worker: 1 and N workers draw the same rollouts,
  and a resumed run draws the same rollouts as an uninterrupted one. Gumbel-max over logits / T (after the
  top-p filter) is an exact sample of the softmax (`generation/keyed_sampling.py`; at scale, vLLM's per-request
  seeds give the same property).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel

from essaflow.data.schema import Problem
from essaflow.generation.group_decode import decode_groups
from essaflow.generation.keyed_sampling import GumbelSampler, hash_keys
from essaflow.generation.prompt_format import PromptFormat
from essaflow.generation.sampling import Rollout, encode_prompts, is_stop, model_stop_ids, to_rollout
from essaflow.grpo.config import GRPOConfig
from essaflow.judging.judge import Judge, as_judge


@lru_cache(maxsize=8)
def _epoch_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"grpo-prompts:{seed}:{epoch}").shuffle(order)
    return tuple(order)


def step_prompt_indices(step: int, prompts_per_step: int, num_train: int, seed: int) -> list[int]:
    """Train-problem index of every slot of `step`: epoch-wise shuffled, a function of (seed, step) only."""
    out = []
    for j in range(prompts_per_step):
        flat = step * prompts_per_step + j
        out.append(_epoch_order(num_train, seed, flat // num_train)[flat % num_train])
    return out


def worker_slots(prompts_per_step: int, world_size: int, rank: int) -> list[int]:
    """Slots of this worker: strided, so every worker holds its share of every global mini-batch."""
    return list(range(rank, prompts_per_step, world_size))


def replacement_index(seed: int, step: int, slot: int, round_: int, num_train: int) -> int:
    """Dynamic sampling: the problem tried for `slot` in retry round `round_` (stateless, per slot)."""
    return int(hash_keys(seed, step, slot, round_, 0x5EED).item()) % num_train


@dataclass
class RolloutBatch:
    """One worker's rollouts of one step. B = groups * G rows, group g owns rows g*G..g*G+G-1."""

    input_ids: torch.Tensor  # [B, P + C] left-padded prompt then right-padded completion
    attention_mask: torch.Tensor  # [B, P + C]
    prompt_width: int  # P
    completion_ids: torch.Tensor  # [B, C]
    loss_mask: torch.Tensor  # [B, C] float: completion tokens that carry loss (up to and incl. EOS)
    slots: list[int]  # [groups] global slot of each group
    rewards: torch.Tensor  # [groups, G] reward the advantage uses (after any shaping)
    correct: torch.Tensor  # [groups, G] 1 where the reward reached eval.correct_threshold, else 0
    uniform_first: torch.Tensor  # [groups] zero-variance at the first draw
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    gen_tokens: int = 0
    gen_s: float = 0.0
    retried_groups: int = 0
    engine_logp: torch.Tensor | None = None
    """[B, C] the vLLM engine's log-prob of each completion token (sampling.backend=vllm), for the sync check."""
    reward_parts: dict[str, torch.Tensor] = field(default_factory=dict)
    """[groups, G] each named component of the verifier's reward (a reward returning components; empty else)."""

    @property
    def group_size(self) -> int:
        return self.rewards.shape[1]

    def rows_of(self, groups: list[int]) -> torch.Tensor:
        g = self.group_size
        return torch.tensor([r for i in groups for r in range(i * g, (i + 1) * g)], dtype=torch.long)


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    tokenizer,
    prompts: list[str],
    row_keys: torch.Tensor,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    fmt: PromptFormat | None = None,
) -> Rollout:
    """One completion per raw prompt (repeat prompts for groups), sampled batch-invariantly, with masks.

    Prompts are rendered as everywhere else (`fmt`: chat template, system prompt, BOS once); every EOS id of
    the model's generation_config and the tokenizer ends a completion.
    """
    device = next(model.parameters()).device
    enc = encode_prompts(tokenizer, prompts, fmt or PromptFormat())
    ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    stop = model_stop_ids(model, tokenizer)
    gen_cfg = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=stop,
    )
    sampler = GumbelSampler(row_keys, ids.shape[1], temperature, top_p)
    out = model.generate(
        input_ids=ids, attention_mask=mask, generation_config=gen_cfg, logits_processor=LogitsProcessorList([sampler]),
        synced_gpus=False,  # each rank decodes alone, also on FSDP ranks (whole weights while decoding)
    )  # fmt: skip
    completion = _pad_width(out[:, ids.shape[1] :].cpu(), max_new_tokens, tokenizer.pad_token_id)
    return to_rollout(tokenizer, enc, completion, stop)


@torch.no_grad()
def sample_groups(
    model: PreTrainedModel,
    tokenizer,
    prompts: list[str],
    group_size: int,
    row_keys: torch.Tensor,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    fmt: PromptFormat | None = None,
) -> Rollout:
    """`group_size` completions per raw prompt (prompt i owns rows i*G..i*G+G-1), each prompt prefilled once and
    its G completions decoded from the shared cache (generation/group_decode.py, grpo.shared_prompt).

    The same stream as `sample` on the prompts repeated G times: row r's token at position t is the argmax of the
    same tempered, top-p filtered logits plus the same Gumbel noise of (row_keys[r], t), so the tokens are `sample`'s
    up to float rounding. One difference on checkpoints whose generation_config sets logits processors of its own
    (a repetition penalty, say): transformers merges them into `sample`'s `generate` call; here the draw is exactly
    softmax(logits / T) under top-p, the distribution the loss's log-probs are of.
    """
    device = next(model.parameters()).device
    enc = encode_prompts(tokenizer, prompts, fmt or PromptFormat())
    stop = model_stop_ids(model, tokenizer)
    rows = torch.arange(len(prompts)).repeat_interleave(group_size)
    noisy = GumbelSampler(row_keys, 0, temperature, top_p).scores_at
    ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    completion = decode_groups(
        model, ids, mask, rows.to(device), lambda t, logits, live: noisy(t, logits, live).argmax(dim=-1),
        max_new_tokens, stop, tokenizer.pad_token_id,
    )  # fmt: skip
    completion = _pad_width(completion.cpu(), max_new_tokens, tokenizer.pad_token_id)
    return to_rollout(tokenizer, {k: v[rows] for k, v in enc.items()}, completion, stop)


def _pad_width(completion: torch.Tensor, width: int, pad: int) -> torch.Tensor:
    """Completions right-padded to a fixed width (every row may have stopped early)."""
    if completion.shape[1] >= width:
        return completion
    return torch.nn.functional.pad(completion, (0, width - completion.shape[1]), value=pad)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment R_len (DAPO sec. 3.4, Eq. 13): 0, then linear down to -1 at max_len."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    free = max_len - buffer
    pen = (free - lengths.float()) / buffer
    return torch.where(lengths <= free, torch.zeros_like(pen), pen.clamp(min=-1.0))


def _draw_groups(
    model, tokenizer, problems, keys, s: GRPOConfig, reward: Judge | str, max_new_tokens: int, fmt: PromptFormat | None,
    engine=None,
) -> tuple[Rollout, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:  # fmt: skip
    """Sample G per problem (on `engine`, a grpo.engine.PolicyEngine, when given); returns the draw and [groups, G]
    correctness, shaped rewards and the reward's named components."""
    g = s.group_size
    row_keys = hash_keys(keys[:, None], torch.arange(g)[None, :]).reshape(-1)
    if engine is None and s.shared_prompt:  # each prompt prefilled once (transformers engine)
        prompts = [p.prompt for p in problems]
        draw = sample_groups(model, tokenizer, prompts, g, row_keys, s.temperature, s.top_p, max_new_tokens, fmt)
    else:
        prompts = [p.prompt for p in problems for _ in range(g)]
        draw_fn = sample if engine is None else engine.draw
        draw = draw_fn(model, tokenizer, prompts, row_keys, s.temperature, s.top_p, max_new_tokens, fmt)
    scores = as_judge(reward).score(draw.texts, [p for p in problems for _ in range(g)])
    # F-GRPO's success rate counts correct completions (reward >= eval.correct_threshold); the advantages use the
    # reward itself, so a graded reward's partial credit reaches the gradient (docs/rewards.md)
    correct = torch.tensor(scores.correct, dtype=torch.float32)
    lengths = draw.completion_mask.sum(dim=1)
    reward_t = torch.tensor(scores.rewards, dtype=torch.float32)
    shaped = reward_t + s.overlong_penalty * overlong_penalty(lengths, max_new_tokens, s.overlong_buffer)
    parts = {name: torch.tensor(col, dtype=torch.float32).view(-1, g) for name, col in scores.components.items()}
    return draw, correct.view(-1, g), shaped.view(-1, g), parts


def collect(
    model: PreTrainedModel,
    tokenizer,
    train: list[Problem],
    slots: list[int],
    step: int,
    s: GRPOConfig,
    reward: Judge | str,
    max_new_tokens: int,
    fmt: PromptFormat | None = None,
    engine=None,
) -> RolloutBatch:
    """This worker's groups for `step`: sample, reward, (dynamic sampling).

    `s` is the run's grpo section; `reward` is the verifier (a Judge of eval.reward, or a registered reward's name);
    `max_new_tokens` is the resolved completion cap (grpo.max_new_tokens, else sampling.max_new_tokens); `fmt`
    renders prompts (data.chat_template, data.system_prompt) exactly as SFT and evaluation do; `engine`
    (grpo.engine.PolicyEngine, sampling.backend=vllm) samples instead of the model's own `generate`, and its
    log-probabilities come back in `engine_logp`.

    Dynamic sampling (DAPO sec. 3.2), when on, retries each zero-variance group with another problem for that
    slot, up to `dynamic_sampling_rounds` times. Groups still uniform afterwards are kept (their advantage is
    zero: no gradient, but their tokens count in the token-mean denominator): a fixed batch shape per worker keeps
    DDP in lock-step. This changes the mu_hat distribution the focal weight sees (docs/algorithms.md sec. 7.2).
    """
    start = time.perf_counter()
    index = step_prompt_indices(step, s.prompts_per_step, len(train), s.seed)
    problems = [train[index[j]] for j in slots]
    slot_t = torch.tensor(slots, dtype=torch.int64)
    draw, correct, rewards, components = _draw_groups(
        model, tokenizer, problems, hash_keys(s.seed, step, slot_t, 0), s, reward, max_new_tokens, fmt, engine
    )
    uniform_first = rewards.amax(1) == rewards.amin(1)
    parts = _pieces(draw)
    rows = torch.arange(rewards.numel()).view(rewards.shape)  # row index of each (group, sample) into the pieces
    draws = _DrawSet(
        model, tokenizer, s, reward, max_new_tokens, parts, rows, correct, rewards, components, fmt, engine
    )
    retried = draws.resample_uniform(train, slots, slot_t, step) if s.dynamic_sampling else 0
    width, prompt_ids, prompt_mask, completion, cmask, engine_logp = _assemble(
        parts, rows.reshape(-1), tokenizer.pad_token_id
    )
    truncated = ~is_stop(completion, model_stop_ids(model, tokenizer)).any(dim=1)
    return RolloutBatch(
        input_ids=torch.cat([prompt_ids, completion], dim=1),
        attention_mask=torch.cat([prompt_mask, cmask], dim=1),
        prompt_width=width,
        completion_ids=completion,
        loss_mask=_loss_mask(cmask, truncated, s.overlong_filter),
        slots=list(slots),
        rewards=rewards,
        correct=correct,
        uniform_first=uniform_first,
        truncated=truncated,
        gen_tokens=int(cmask.sum()),
        gen_s=time.perf_counter() - start,
        retried_groups=retried,
        engine_logp=engine_logp if engine is not None else None,
        reward_parts=components,
    )


def _pieces(draw: Rollout) -> dict[str, list[torch.Tensor]]:
    """The first draw's tensors, each the first piece of its list (dynamic sampling appends its retries)."""
    return {
        "prompt_ids": [draw.prompt_ids],
        "prompt_mask": [draw.prompt_mask],
        "completion": [draw.completion_ids],
        "cmask": [draw.completion_mask],
        "engine_logp": [_engine_logp(draw)],
    }


def _loss_mask(cmask: torch.Tensor, truncated: torch.Tensor, overlong_filter: bool) -> torch.Tensor:
    """The completion tokens that carry loss: all of them, or (DAPO overlong filtering) none of a truncated one."""
    loss_mask = cmask.float()
    if overlong_filter:
        loss_mask = loss_mask * (~truncated)[:, None].float()
    return loss_mask


def _engine_logp(draw: Rollout) -> torch.Tensor:
    """The engine's log-probs of the draw's tokens, zeros where the transformers engine drew it."""
    if draw.engine_logprobs is not None:
        return draw.engine_logprobs
    return torch.zeros(draw.completion_ids.shape, dtype=torch.float32)


def _assemble(parts: dict[str, list[torch.Tensor]], order: torch.Tensor, pad: int):
    """The draws' pieces as one batch in row order: prompts left-padded to one width, completions as drawn."""
    width = max(p.shape[1] for p in parts["prompt_ids"])

    def left_pad(pieces: list[torch.Tensor], value: int) -> torch.Tensor:
        return torch.cat([torch.nn.functional.pad(p, (width - p.shape[1], 0), value=value) for p in pieces])

    prompt_ids = left_pad(parts["prompt_ids"], pad)[order]
    prompt_mask = left_pad(parts["prompt_mask"], 0)[order]
    completion, cmask = torch.cat(parts["completion"])[order], torch.cat(parts["cmask"])[order]
    return width, prompt_ids, prompt_mask, completion, cmask, torch.cat(parts["engine_logp"])[order]


@dataclass
class _DrawSet:
    """The pieces a step's rollout is assembled from, and DAPO's dynamic sampling over them (DAPO sec. 3.2)."""

    model: PreTrainedModel
    tokenizer: object
    s: GRPOConfig
    reward: Judge | str
    max_new_tokens: int
    parts: dict[str, list[torch.Tensor]]
    rows: torch.Tensor
    correct: torch.Tensor
    rewards: torch.Tensor
    reward_parts: dict[str, torch.Tensor]
    fmt: PromptFormat | None = None
    engine: object = None

    def resample_uniform(self, train: list[Problem], slots: list[int], slot_t: torch.Tensor, step: int) -> int:
        """Redraw each zero-variance group with another problem for its slot, up to dynamic_sampling_rounds
        times; the newest draw of a slot replaces its rows. Returns how many groups were redrawn."""
        s, g, retried = self.s, self.s.group_size, 0
        offset = len(slots) * g
        for round_ in range(1, s.dynamic_sampling_rounds + 1):
            todo = [i for i in range(len(slots)) if bool(self.rewards[i].amax() == self.rewards[i].amin())]
            if not todo:
                break
            retried += len(todo)
            alt = [train[replacement_index(s.seed, step, slots[i], round_, len(train))] for i in todo]
            keys = hash_keys(s.seed, step, slot_t[todo], round_)
            d2, c2, r2, parts2 = _draw_groups(
                self.model, self.tokenizer, alt, keys, s, self.reward, self.max_new_tokens, self.fmt, self.engine
            )
            pieces = (d2.prompt_ids, d2.prompt_mask, d2.completion_ids, d2.completion_mask, _engine_logp(d2))
            for name, piece in zip(self.parts, pieces):
                self.parts[name].append(piece)
            for name in parts2.keys() - self.reward_parts.keys():  # a component first seen in a retry
                self.reward_parts[name] = torch.zeros_like(self.rewards)
            for k, i in enumerate(todo):  # keep the newest draw of the slot
                self.correct[i], self.rewards[i] = c2[k], r2[k]
                for name, col in self.reward_parts.items():  # a component the retry did not return counts 0
                    col[i] = parts2[name][k] if name in parts2 else 0.0
                self.rows[i] = offset + torch.arange(k * g, (k + 1) * g)
            offset += len(todo) * g
        return retried
