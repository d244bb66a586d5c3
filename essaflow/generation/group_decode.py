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
    return decode_rows(model, cache, logits, mask[rows], pick, max_new_tokens, stop, pad_id)


def decode_rows(
    model: torch.nn.Module,
    cache: object,
    logits: torch.Tensor,
    mask: torch.Tensor,
    pick: Pick,
    max_new_tokens: int,
    stop: Sequence[int],
    pad_id: int,
    on_leave: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """The decoding loop of rows whose prompts are in `cache` (one cache row per row, `mask` their attention mask
    so far) and whose next-token logits are `logits`: completion ids [rows, <= max_new_tokens], pad_id after each
    row's first stop id. on_leave(live): told which of the original rows are still decoding whenever some leave."""
    n, device = len(mask), mask.device
    position = mask.sum(dim=1, keepdim=True)  # the first completion token's: one past the last prompt token
    stop_ids = torch.tensor(list(stop), dtype=torch.long, device=device)
    out = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=device)
    live = torch.arange(n, device=device)  # the rows still decoding
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
            if on_leave is not None:
                on_leave(live)
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        step = model(
            input_ids=token[:, None], attention_mask=mask, position_ids=position + t, past_key_values=cache,
            use_cache=True,
        )  # fmt: skip
        logits = step.logits[:, -1]
    return out[:, : t + 1]


def common_prefix_length(ids: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading tokens every left-padded prompt shares, at most the shortest prompt's length less one (each
    row keeps a token of its own, whose logits start its completion)."""
    lengths = mask.sum(dim=1)
    shortest = int(lengths.min())
    starts = ids.shape[1] - lengths  # the column of each row's first token
    cols = starts[:, None] + torch.arange(shortest - 1, device=ids.device)[None, :]
    heads = ids.gather(1, cols)
    same = (heads == heads[:1]).all(dim=0)
    return int(same.long().cumprod(dim=0).sum())


@torch.no_grad()
def decode_shared_prefix(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    owner: torch.Tensor,
    select: Callable[[torch.Tensor], None],
    pick: Pick,
    max_new_tokens: int,
    stop: Sequence[int],
    pad_id: int,
) -> torch.Tensor:
    """decode_rows of left-padded prompts that share a token prefix (a chat template's system turn) and run under
    different weights: row r under weight set owner[r], which select(owners) switches to row by row before every
    forward pass. The prefix is computed once per weight set, its cache rows copied to that set's rows; each row's
    own tail then runs on top of it (a padded gap between the two is masked out). Same positions and masks as
    decoding the whole prompts, so the same tokens up to float rounding."""
    shared = common_prefix_length(ids, mask)
    if shared == 0:
        select(owner)
        cache, logits = prefill(model, ids, mask, torch.arange(len(ids), device=ids.device))
        return decode_rows(
            model, cache, logits, mask, pick, max_new_tokens, stop, pad_id, lambda live: select(owner[live])
        )
    sets, row_set = torch.unique(owner, return_inverse=True)
    first = ids.shape[1] - int(mask[0].sum())  # row 0's first token: the prefix is the same in every row
    prefix = ids[:1, first : first + shared].expand(len(sets), shared)
    select(sets)
    cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
    cache.batch_select_indices(row_set)
    tail = ids[:, shared:]  # every row's tail is right-aligned in it; what lies left of a tail is masked
    tail_mask = (
        torch.arange(tail.shape[1], device=ids.device) >= tail.shape[1] - (mask.sum(dim=1, keepdim=True) - shared)
    ).long()
    full_mask = torch.cat([mask.new_ones(len(ids), shared), tail_mask], dim=1)
    positions = (full_mask.cumsum(dim=1) - 1)[:, shared:]
    select(owner)
    out = model(
        input_ids=tail.masked_fill(tail_mask == 0, pad_id), attention_mask=full_mask, position_ids=positions,
        past_key_values=cache, use_cache=True, logits_to_keep=1,
    )  # fmt: skip
    return decode_rows(
        model, out.past_key_values, out.logits[:, -1], full_mask, pick, max_new_tokens, stop, pad_id,
        lambda live: select(owner[live]),
    )  # fmt: skip
