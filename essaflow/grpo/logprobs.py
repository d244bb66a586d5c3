"""Token log-probabilities of completions under a policy, per row or with each group's prompt computed once.

Per row (`groups=None`): each row runs its prompt and completion through the model in one forward.

Shared prompt (`groups`, grpo.shared_prompt): a group's rows hold the same prompt (a GRPO group's G samples), so its
prompt runs once with use_cache, its keys and values are copied out to the group's rows (`group_decode.prefill`: a
repeat_interleave by the groups' row counts, whose backward adds the rows' gradients into the one prompt), and the
completions run against that cache. The first completion token is predicted from the prompt's last position, whose
logits are copied out the same way. Positions and the attention mask are the per-row path's, so the log-probs, and
the loss's gradients, are the same up to float rounding (tests/unit/grpo/test_shared_prompt.py).
"""

from __future__ import annotations

import torch

from essaflow.generation.group_decode import prefill


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_width: int,
    temperature: float,
    with_entropy: bool = False,
    groups: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(y_t | x, y_<t) / T-scaled, for the completion tokens: [B, C] (and per-token entropy, detached); 0
    in the columns after every row's last token.

    input_ids / attention_mask: [B, P + C], prompts left-padded to P = prompt_width, completions after them. Position
    ids follow the attention mask, as in generation, so these are the log-probs the samples were drawn from.
    groups: [B] each row's group id, a group's rows consecutive and holding the same prompt; given, each group's
    prompt is computed once (module docstring); None, every row carries its own.
    """
    device = next(model.parameters()).device
    # columns after every row's last token are padding: cut, computed as 0 (every loss and metric masks them)
    width, used = input_ids.shape[1] - prompt_width, _used_width(attention_mask, prompt_width)
    ids, mask = input_ids[:, : prompt_width + used].to(device), attention_mask[:, : prompt_width + used].to(device)
    if groups is None:
        logits = _per_row_logits(model, ids, mask, prompt_width)
    else:
        logits = _shared_prompt_logits(model, ids, mask, prompt_width, groups.to(device))
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, ids[:, prompt_width:].unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = torch.nn.functional.pad(-(logp_all.exp() * logp_all).sum(dim=-1), (0, width - used))
    return torch.nn.functional.pad(logp, (0, width - used)), entropy


def _used_width(attention_mask: torch.Tensor, prompt_width: int) -> int:
    """Completion columns up to the last one holding a token in some row (at least 1)."""
    columns = attention_mask[:, prompt_width:].any(dim=0).nonzero()
    return int(columns.max()) + 1 if len(columns) else 1


def _per_row_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, width: int) -> torch.Tensor:
    """[B, C, V]: the logits that predict each completion token, from one forward of every row's whole sequence
    (only the last C + 1 positions' logits are materialised)."""
    completion = ids.shape[1] - width
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=completion + 1, use_cache=False
    )
    return out.logits[:, :-1]


def _shared_prompt_logits(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, width: int, groups: torch.Tensor
) -> torch.Tensor:
    """[B, C, V] as `_per_row_logits`, each group's prompt run once: the prompt's last position predicts the first
    completion token; the completion's tokens but the last, run against the copied-out cache, predict the rest."""
    _, counts = torch.unique_consecutive(groups, return_counts=True)
    starts = counts.cumsum(0) - counts  # each group's first row
    rows = torch.arange(len(counts), device=ids.device).repeat_interleave(counts)  # row -> its group's ordinal
    prompt_ids, prompt_mask = ids[starts, :width], mask[starts, :width]
    if not (torch.equal(prompt_ids[rows], ids[:, :width]) and torch.equal(prompt_mask[rows], mask[:, :width])):
        raise ValueError("shared prompt: the rows of a group hold different prompts (or a group's rows are apart)")
    cache, first = prefill(model, prompt_ids, prompt_mask, rows)
    if ids.shape[1] - width == 1:
        return first[:, None]
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=ids[:, width:-1], attention_mask=mask[:, :-1], position_ids=positions[:, width:-1],
        past_key_values=cache, use_cache=False,
    )  # fmt: skip
    return torch.cat([first[:, None], out.logits], dim=1)
