"""Which rows of a rollout batch each update sees: global mini-batches, micro-batches, and their global counts.

The step's groups are split into `mini_batches` global mini-batches by slot, so mini-batch m holds the same
groups whatever the worker count (workers own strided slots, `rollout.worker_slots`). Loss pieces are normalised
by the mini-batch's *global* token and sequence counts (a 16-byte all-reduce), so the gradients summed over
workers and micro-batches equal the single-worker gradient of the same batch.
"""

from __future__ import annotations

import torch

from essaflow.grpo.logprobs import token_logprobs
from essaflow.grpo.rollout import RolloutBatch
from essaflow.grpo.worker_group import CommCounter, WorkerInfo, all_reduce


def mini_batch_rows(batch: RolloutBatch, prompts_per_step: int, mini_batches: int) -> list[torch.Tensor]:
    """Row indices of each global mini-batch held by this worker (slot // (P / mini_batches) == m)."""
    per_mb = prompts_per_step // mini_batches
    return [
        batch.rows_of([i for i, slot in enumerate(batch.slots) if slot // per_mb == m]) for m in range(mini_batches)
    ]


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """`rows` in pieces of `size` (0: one piece) for gradient accumulation."""
    return [rows] if size <= 0 or size >= len(rows) else list(torch.split(rows, size))


def global_counts(batch: RolloutBatch, rows: torch.Tensor, info: WorkerInfo, comm: CommCounter) -> tuple[float, float]:
    """(loss tokens, sequences) of the mini-batch over all workers: the loss's normalisers."""
    counts = torch.tensor([float(batch.loss_mask[rows].sum()), float(len(rows))], dtype=torch.float64)
    num_tokens, num_seqs = all_reduce(counts, info, comm).tolist()
    return num_tokens, num_seqs


def row_logprobs(
    module: torch.nn.Module,
    batch: RolloutBatch,
    rows: torch.Tensor,
    temperature: float,
    shared_prompt: bool,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the completions of `rows`, each group's prompt computed once when
    `shared_prompt` (a micro-batch may hold part of a group: its rows share that prompt all the same)."""
    groups = rows // batch.group_size
    if not shared_prompt or len(torch.unique(groups)) == len(rows):  # one row a group: nothing to share
        groups = None
    ids, mask = batch.input_ids[rows], batch.attention_mask[rows]
    return token_logprobs(module, ids, mask, batch.prompt_width, temperature, with_entropy, groups)


@torch.no_grad()
def frozen_logprobs(
    module: torch.nn.Module, batch: RolloutBatch, temperature: float, chunk: int = 0, shared_prompt: bool = False
) -> torch.Tensor:
    """Log-probs of every row's completion without gradient (pi_old, pi_ref), `chunk` rows a pass (0: one pass)."""
    pieces = micro_batches(torch.arange(len(batch.input_ids)), chunk)
    return torch.cat([row_logprobs(module, batch, r, temperature, shared_prompt)[0].cpu() for r in pieces])
