"""Several completions per prompt from one prefill: each prompt's keys and values are computed once and its cache
rows are then copied out to the prompt's completions, which decode side by side (what vLLM's prefix cache gives its
engine). On the transformers engine GRPO's rollout draws its G samples per prompt this way (`grpo.rollout`), as
pass@k evaluation draws its n per problem (`TransformersGenerator.rollout_groups`, eval.shared_prompt), and the
policy's log-prob forward computes each group's prompt once with the same `prefill` (`grpo.logprobs`).

Positions and masks are those of per-row decoding of left-padded prompts (HF `generate`), and every row stops at
its first stop id and is padded after it, so a row's tokens are those per-row decoding draws with the same choice
rule, up to float rounding in the prompt's forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Pick = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
"""pick(t, logits, rows) -> token ids: the token at completion position t of each of `rows` (indices into the
rows being decoded) from its float32 logits [len(rows), vocab]."""


def prefill(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor
) -> tuple[object, torch.Tensor]:
    """Run each left-padded prompt once with use_cache; returns (its cache, last-position logits [len(rows), V]),
    both indexed out so that row r holds prompt rows[r]'s (a repeat_interleave by the prompts' row counts when rows
    is sorted). Under autograd the index adds the rows' gradients back into the one prompt's activations."""
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_select_indices(rows)
    return cache, out.logits[:, -1][rows]


@torch.no_grad()
def decode_groups(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    rows: torch.Tensor,
    pick: Pick,
    max_new_tokens: int,
    stop: Sequence[int],
    pad_id: int,
) -> torch.Tensor:
    """Completion ids [len(rows), <= max_new_tokens] of row r, a continuation of prompt rows[r] (ids, mask: the
    prompts once, left-padded), chosen by `pick`; after a row's first stop id it holds pad_id. A row leaves the
    batch once it has stopped; decoding ends when every row has, as `generate` does (the caller pads to a fixed
    width)."""
    cache, logits = prefill(model, ids, mask, rows)
    mask, n = mask[rows], len(rows)
    position = mask.sum(dim=1, keepdim=True)  # the first completion token's: one past the last prompt token
    stop_ids = torch.tensor(list(stop), dtype=torch.long, device=ids.device)
    out = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=ids.device)
    live = torch.arange(n, device=ids.device)  # the rows still decoding
    for t in range(max_new_tokens):
        token = pick(t, logits.float(), live)
        out[live, t] = token
        going = ~torch.isin(token, stop_ids)
        if t == max_new_tokens - 1 or not bool(going.any()):
            break
        if not bool(going.all()):  # stopped rows leave: the rest decode at their own cost only
            keep = going.nonzero().squeeze(1)
            live, token, mask, position = live[keep], token[keep], mask[keep], position[keep]
            cache.batch_select_indices(keep)
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        step = model(
            input_ids=token[:, None], attention_mask=mask, position_ids=position + t, past_key_values=cache,
            use_cache=True,
        )  # fmt: skip
        logits = step.logits[:, -1]
    return out[:, : t + 1]
