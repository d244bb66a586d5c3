"""How the ranks hold the policy: DDP replicas or FSDP2 shards (`grpo.sharding`, docs/algorithms.md sec. 3.13).

ddp   every rank holds the whole policy, its gradients and AdamW state in `model.dtype`; gradients are all-reduced.
fsdp  FSDP2 (`torch.distributed.fsdp.fully_shard`) per decoder layer, then the root, on an explicit 1-D device mesh
      over all ranks: each rank keeps 1/W of the float32 master weights, their gradients and the AdamW state.
      With LoRA (asked for: auto keeps LoRA on ddp) the factors are the float32 masters and the frozen base is
      sharded too, in model.dtype.
      Forward and backward run in `model.dtype` (`MixedPrecisionPolicy(param_dtype=model.dtype,
      reduce_dtype=float32)`): a layer's weights are all-gathered in the compute dtype just before it runs and its
      gradients reduce-scattered in float32. Rollouts and held-out decodes run inside `DataParallel.gathered()`:
      the whole policy unsharded once, so ranks may decode different numbers of tokens without a collective each.

Both divide nothing by hand: DDP and FSDP2 average the gradients over ranks, which the loop undoes by scaling the
loss by the world size (step.py). A one-rank fsdp run (in-process) gets its own one-member gloo group.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

from essaflow.grpo.worker_group import CommCounter, WorkerInfo

Sharding = Literal["ddp", "fsdp"]


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor (a DTensor's local shard, a plain tensor itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


def whole(t: torch.Tensor) -> torch.Tensor:
    """A tensor in full: a DTensor (an FSDP shard, or a norm over shards) is all-gathered, so every rank calls this
    in the same order; a plain tensor is itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _bytes(tensors: Any) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors if isinstance(t, torch.Tensor))


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks, by the class names Hugging Face lists in `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to shard (_no_split_modules={names})")
    return layers


def checkpoint_activations(model: torch.nn.Module) -> None:
    """Recompute each decoder layer's activations in backward instead of keeping them (non-reentrant
    torch.utils.checkpoint; the parameter names stay as they are, so checkpoints do not change)."""
    from torch.utils.checkpoint import checkpoint

    for layer in decoder_layers(model):
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False)


@dataclass
class DataParallel:
    """The policy as the ranks run it: what forward/backward goes through, gradient sync, the full weights."""

    sharding: Sharding
    module: torch.nn.Module
    """What the loss's forward runs through: the DDP wrapper, the FSDP root, or the policy itself (one ddp rank)."""
    info: WorkerInfo
    comm: CommCounter

    def accumulate(self, sync: bool) -> contextlib.AbstractContextManager:
        """A micro-batch's backward: gradients reduced over ranks only when `sync` (the mini-batch's last)."""
        if self.info.world_size == 1:
            return contextlib.nullcontext()
        if self.sharding == "ddp":
            return contextlib.nullcontext() if sync else self.module.no_sync()
        return self._fsdp_sync(sync)

    @contextlib.contextmanager
    def _fsdp_sync(self, sync: bool) -> Iterator[None]:
        self.module.set_requires_gradient_sync(sync)
        yield
        if sync:  # what the reduce-scatter carries: every gradient once, in float32
            self.comm.grad += sum(p.numel() * 4 for p in self.module.parameters() if p.requires_grad)
        self.module.set_requires_gradient_sync(True)

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """The whole policy on every rank for decoding (fsdp: all-gathered once, freed on exit; all ranks enter)."""
        if self.sharding == "ddp":
            yield
            return
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in self.module.modules() if isinstance(m, FSDPModule)]
        for unit in units:
            unit.unshard()
            unit.set_reshard_after_forward(False)
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(True)

    def clip_grad_norm(self, params: list[torch.nn.Parameter], max_norm: float) -> float:
        """Clip the global gradient norm (over all shards) to max_norm; returns the norm before clipping."""
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(whole(norm))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy's weights on CPU (fsdp: gathered from the shards; a collective, rank 0 gets them)."""
        if self.sharding == "ddp":
            return {k: v.detach().cpu() for k, v in unwrap(self.module).state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """The trainable parameters whole, on CPU, by name (fsdp: each gathered from the shards in turn; every rank
        takes part, in the same order). What a LoRA adapter saves."""
        out = {}
        for name, p in unwrap(self.module).named_parameters():
            if p.requires_grad:
                out[name] = whole(p).detach().cpu()
        return out

    def memory(self, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> dict[str, int]:
        """This rank's bytes of parameters, gradients and optimizer state, counted from its own tensors (shards)."""
        model = unwrap(self.module)
        state = [t for s in optimizer.state.values() for t in s.values()]
        grads = [p.grad for p in params if p.grad is not None]
        row = {"params": _bytes(model.parameters()), "grads": _bytes(grads), "optimizer": _bytes(state)}
        return {**row, "total": sum(row.values())}


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The policy inside a DDP wrapper (an FSDP2 root is the policy itself)."""
    return getattr(module, "module", module) if type(module).__name__ == "DistributedDataParallel" else module


def wrap(
    model: torch.nn.Module,
    sharding: Sharding,
    info: WorkerInfo,
    comm: CommCounter,
    compute_dtype: torch.dtype,
    activation_checkpointing: bool = False,
) -> DataParallel:
    """Put the policy on the ranks: DDP replicas (world size 1: as it is) or FSDP2 shards with float32 masters."""
    if activation_checkpointing:
        checkpoint_activations(model)
    if sharding == "fsdp":
        return DataParallel("fsdp", shard(model, info, compute_dtype), info, comm)
    return DataParallel("ddp", wrap_ddp(model, info, comm), info, comm)


def shard(model: torch.nn.Module, info: WorkerInfo, compute_dtype: torch.dtype) -> torch.nn.Module:
    """FSDP2 per decoder layer, then the root (embeddings, final norm, head), on a mesh over all ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    trainable = [p for p in model.parameters() if p.requires_grad]
    if len(trainable) == len(list(model.parameters())):
        model.float()  # master weights, their gradients and AdamW state are float32 whatever model.dtype says
    else:  # LoRA: the factors get float32 masters; the frozen base stays in model.dtype, sharded all the same
        for p in trainable:
            p.data = p.data.float()
    mesh = init_device_mesh(info.device.type, (info.world_size,))
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    # peft: the root is the Hugging Face model inside, which both the adapter's forward and generate run through
    root = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in decoder_layers(root):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    return model


def wrap_ddp(model: torch.nn.Module, info: WorkerInfo, comm: CommCounter) -> torch.nn.Module:
    """DDP around the policy on several workers (with a hook that counts the gradient bytes); else the policy."""
    if info.world_size == 1:
        return model
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(
        model, device_ids=[info.device.index] if info.device.type == "cuda" else None, forward_sync_buffers=False
    )

    def counting_hook(state: CommCounter, bucket):  # measure what DDP really reduces
        state.grad += bucket.buffer().numel() * bucket.buffer().element_size()
        return allreduce_hook(None, bucket)

    ddp.register_comm_hook(comm, counting_hook)
    return ddp


@contextlib.contextmanager
def process_group(sharding: Sharding, info: WorkerInfo) -> Iterator[None]:
    """A one-member gloo group for an in-process fsdp run (FSDP2 needs one); Ray Train ranks already have theirs."""
    if sharding != "fsdp" or dist.is_initialized():
        yield
        return
    if info.world_size != 1:
        raise RuntimeError("an fsdp run of several ranks needs their process group (Ray Train sets it up)")
    backend = "nccl" if info.device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
