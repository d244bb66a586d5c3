"""Where a worker sits in the DDP group, and the bytes it all-reduces: gradients (DDP's hook) and the step's sums."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class WorkerInfo:
    """Where a worker sits in the DDP group."""

    rank: int
    world_size: int
    device: torch.device


@dataclass
class CommCounter:
    """Bytes this worker all-reduced in the current step: gradients (DDP hook) and auxiliary sums."""

    grad: int = 0
    aux: int = 0


def all_reduce(t: torch.Tensor, info: WorkerInfo, comm: CommCounter) -> torch.Tensor:
    """Sum `t` over workers in place (counted as auxiliary bytes); a no-op on one worker."""
    if info.world_size > 1:
        dist.all_reduce(t)
        comm.aux += t.numel() * t.element_size()
    return t
