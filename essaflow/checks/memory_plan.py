"""Will an F-GRPO config fit its GPUs? Each rank's training-step peak, estimated from config.json alone.

What a rank holds (docs/scaling.md, "Memory plan"):

- ddp: a full replica of weights, gradients, DDP's gradient bucket and AdamW's two moments, all in model.dtype
  (essaflow's DDP ranks keep no float32 master copy);
- fsdp: float32 master weights, float32 gradients and float32 AdamW moments, each 1/world of the model, plus the
  compute-dtype copies FSDP2 all-gathers: the root's (embeddings, final norm, LM head) for the whole step and two
  decoder layers at a time (the one computing and the one prefetched), and one layer's float32 gradient before its
  reduce-scatter.
- lora: the frozen base in model.dtype (fsdp: 1/world of it), the factors in float32 as above;
- both: the activations one micro-batch keeps for backward, and its logits. Activations per token and decoder layer
  are (10 h + 4 i) elements of model.dtype (h hidden, i MLP width: the norms' float32 inputs, q/k/v/o and the
  attention output with a fused SDPA kernel, the gated MLP's four i-wide tensors; the count of Korthikanti et al.,
  arXiv 2205.05198 sec. 4.1, for a SwiGLU layer without an s^2 attention term). The logits of the completion
  positions take model.dtype plus two float32 copies (the upcast and the saved log-softmax) per vocabulary entry.
  With activation checkpointing a layer keeps only its input (h per token) and one layer's activations exist at a
  time, while it is recomputed in backward. With grpo.shared_prompt a micro-batch's prompt tokens count once per
  group (unless it holds one row a group), plus the prompt's keys and values copied out to each row (2 kv_heads
  head_dim per prompt token, row and layer), which attention keeps for backward.

Rollout generation is another peak (its KV cache), reported beside the plan but not part of the verdict:
`kv_cache_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from essaflow.checks.findings import Findings
from essaflow.methods import method_of
from essaflow.model.architecture import Architecture

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig

GiB = 1024**3
RESERVED_BYTES = 1 * GiB
"""Per GPU, outside the plan: the CUDA context and the allocator's slack."""
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Target:
    """Where and how a config trains: the numbers the plan needs besides the architecture."""

    world: int
    """Ranks (grpo.workers.count), one GPU each."""
    gpu_memory_gib: float
    """Memory of each rank's GPU (grpo.workers.gpu_memory_gib)."""
    dtype: str
    """Compute dtype (model.dtype)."""
    micro_batch: int
    """Sequences per forward/backward (grpo.micro_batch_size, or the rank's whole mini-batch)."""
    prompt_tokens: int
    """Longest prompt, in tokens (data.max_prompt_tokens, else data.max_prompt_chars as an upper bound)."""
    completion_tokens: int
    """Completion cap (grpo.max_new_tokens, else sampling.max_new_tokens)."""
    parameters: Literal["lora", "full"] = "full"
    lora_rank: int = 0
    lora_modules: tuple[str, ...] = ()
    activation_checkpointing: bool = False
    """grpo.activation_checkpointing: layers recompute their activations in backward."""
    group_size: int = 1
    """grpo.group_size: rows sharing one prompt."""
    shared_prompt: bool = False
    """grpo.shared_prompt: each group's prompt computed once (not under activation checkpointing)."""


@dataclass
class MemoryPlan:
    """One rank's estimated peak: named parts in bytes, against the GPU's usable memory."""

    sharding: str
    target: Target
    parameter_count: int
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def usable(self) -> int:
        return int(self.target.gpu_memory_gib * GiB) - RESERVED_BYTES

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def summary(self) -> str:
        """One line with every number: the verdict, the parts and the target."""
        t = self.target
        parts = ", ".join(f"{name} {b / GiB:.1f}" for name, b in self.parts.items())
        verdict = "fits" if self.fits else "does not fit"
        return (
            f"{self.sharding} on {t.world} x {t.gpu_memory_gib:g} GiB: {self.total / GiB:.1f} GiB a rank {verdict} "
            f"in {self.usable / GiB:.1f} GiB usable ({parts}; {self.parameter_count / 1e9:.2f}B parameters, "
            f"{t.parameters}, {t.dtype}, micro-batch {t.micro_batch} x {t.prompt_tokens + t.completion_tokens} tokens)"
        )


def lora_parameters(arch: Architecture, rank: int, modules: tuple[str, ...]) -> int:
    """LoRA's A and B over the targeted projections of every layer."""
    shapes = arch.projection_shapes()
    return arch.layers * sum(rank * (shapes[m][0] + shapes[m][1]) for m in modules if m in shapes)


def activation_bytes(arch: Architecture, t: Target) -> tuple[int, int]:
    """(decoder-layer activations, logits) one micro-batch keeps for its backward."""
    width = _BYTES[t.dtype]
    tokens, copies = t.micro_batch * (t.prompt_tokens + t.completion_tokens), 0
    m, g = t.micro_batch, t.group_size
    groups = min(m, m // g if m % g == 0 else m // g + 2)  # a micro-batch may start and end mid-group
    if t.shared_prompt and not t.activation_checkpointing and groups < m:  # else nothing is shared: per row
        tokens = groups * t.prompt_tokens + m * t.completion_tokens
        # the prompt's keys and values copied out to every row, kept by attention for backward
        copies = m * t.prompt_tokens * arch.layers * 2 * arch.kv_heads * arch.head_dim * width
    per_layer = 10 * arch.hidden + 4 * arch.intermediate
    if t.activation_checkpointing:  # every layer's input, and one layer's activations while it is recomputed
        layers = tokens * (arch.layers * arch.hidden + per_layer) * width
    else:
        layers = tokens * arch.layers * per_layer * width + copies
    logits = t.micro_batch * (t.completion_tokens + 1) * arch.vocab * (width + 2 * 4)
    return layers, logits


def kv_cache_bytes(arch: Architecture, t: Target, sequences: int) -> int:
    """The KV cache of generating `sequences` rollouts at once to their full length (keys and values, all layers)."""
    per_token = 2 * arch.layers * arch.kv_heads * arch.head_dim * _BYTES[t.dtype]
    return sequences * (t.prompt_tokens + t.completion_tokens) * per_token


def plan_memory(arch: Architecture, sharding: Literal["ddp", "fsdp"], t: Target) -> MemoryPlan:
    """One rank's peak for `sharding` on target `t` (the module docstring says what each part counts)."""
    n = arch.parameters()
    width = _BYTES[t.dtype]
    result = MemoryPlan(sharding, t, n)
    trained = n if t.parameters == "full" else lora_parameters(arch, t.lora_rank, t.lora_modules)
    if t.parameters == "lora":  # the frozen base in model.dtype; peft keeps the factors in float32
        result.parts["frozen base"] = n * width if sharding == "ddp" else -(-n // t.world) * width
        width = 4
    if sharding == "fsdp":
        shard = -(-trained // t.world)
        result.parts["fp32 master weights"] = shard * 4
        result.parts["fp32 gradients"] = shard * 4
        result.parts["fp32 AdamW moments"] = shard * 8
        gathered = arch.outer_parameters() + 2 * arch.layer_parameters()
        layer_grad = arch.layer_parameters() if t.parameters == "full" else -(-trained // arch.layers)
        result.parts["gathered compute weights"] = gathered * _BYTES[t.dtype] + layer_grad * 4
    else:
        result.parts["weights"] = trained * width
        result.parts["gradients + DDP bucket"] = 2 * trained * width
        result.parts["AdamW moments"] = 2 * trained * width
    layers, logits = activation_bytes(arch, t)
    result.parts["activations"] = layers
    result.parts["logits"] = logits
    return result


@dataclass
class ConfigPlan:
    """check-config's verdict on a config: the plan of its sharding, the other sharding's for comparison, notes."""

    chosen: MemoryPlan
    other: MemoryPlan
    rollout_kv_bytes: int
    source: str
    """Where the architecture's numbers came from (a config.json path, or the recipe's published numbers)."""

    def problem(self) -> str | None:
        """The one error line when the chosen sharding cannot fit, naming the numbers; None when it fits."""
        if self.chosen.fits:
            return None
        alternative = f"; {self.other.sharding} would need {self.other.total / GiB:.1f} GiB"
        return f"grpo.workers.gpu_memory_gib: {self.chosen.summary()}{alternative}"

    def notes(self) -> list[str]:
        rollouts = (
            f"memory plan: rollout KV cache {self.rollout_kv_bytes / GiB:.1f} GiB a rank (all of its rollouts in one "
            "generate call; not in the verdict above)"
        )
        return [
            f"memory plan ({self.source}): {self.chosen.summary()}",
            f"memory plan: {self.other.summary()}",
            rollouts,
        ]


def target_of(cfg: PipelineConfig) -> Target | None:
    """The plan's target read from a PipelineConfig; None when it asks for no plan (no grpo.workers.gpu_memory_gib,
    or not F-GRPO)."""
    g = cfg.grpo
    if not method_of(cfg).plans_memory or g.workers.gpu_memory_gib is None:
        return None
    d = cfg.data
    prompt = d.max_prompt_tokens or d.max_prompt_chars  # a token is at least one character: an upper bound
    if prompt is None:
        raise ValueError("data.max_prompt_tokens or data.max_prompt_chars: the memory plan needs a prompt cap")
    rows_per_rank = g.prompts_per_step // (g.workers.count * g.mini_batches) * g.group_size
    return Target(
        world=g.workers.count,
        gpu_memory_gib=g.workers.gpu_memory_gib,
        dtype=cfg.model.dtype,
        micro_batch=min(g.micro_batch_size or rows_per_rank, rows_per_rank),
        prompt_tokens=prompt,
        completion_tokens=g.max_new_tokens or cfg.sampling.max_new_tokens,
        parameters=g.parameters,
        lora_rank=cfg.model.lora_rank,
        lora_modules=tuple(cfg.model.target_modules),
        activation_checkpointing=g.activation_checkpointing,
        group_size=g.group_size,
        shared_prompt=g.shared_prompt,
    )


def plan_config(cfg: PipelineConfig) -> ConfigPlan | str | None:
    """The memory plan of a PipelineConfig: a ConfigPlan, a line saying why none could be made, or None when the
    config asks for none."""
    from essaflow.grpo.config import resolved_sharding
    from essaflow.model.architecture import read_architecture

    target = target_of(cfg)
    if target is None:
        return None
    arch, source = read_architecture(cfg.model.name_or_path)
    if arch is None:
        return f"memory plan: not made ({source})"
    chosen = resolved_sharding(cfg.grpo)
    other = "ddp" if chosen == "fsdp" else "fsdp"
    rollouts = cfg.grpo.prompts_per_step // cfg.grpo.workers.count * cfg.grpo.group_size
    return ConfigPlan(
        plan_memory(arch, chosen, target),
        plan_memory(arch, other, target),
        kv_cache_bytes(arch, target, rollouts),
        source,
    )


def memory_findings(cfg: PipelineConfig) -> Findings:
    """check-config's memory plan of a config, as notes (the plan of each sharding and the rollouts' KV cache, or
    why no plan was made) and the problem when the chosen sharding cannot fit; a config that asks for a plan
    without a prompt cap (or of a config.json that is no decoder the plan knows) is a problem too."""
    try:
        result = plan_config(cfg)
    except ValueError as err:
        return Findings([str(err)])
    if isinstance(result, str):
        return Findings(notes=[result])
    if result is None:
        return Findings()
    problem = result.problem()
    return Findings([problem] if problem else [], result.notes())
