"""The vLLM engine behind `sampling.backend: vllm`: one engine per process and model, LoRA adapters per request.

Evaluation, ESSA scoring and GRPO rollouts all reach vLLM through `VLLMEngine`: prompts arrive as token ids rendered
by `prompt_format` with the checkpoint's own HF tokenizer (vLLM never tokenises or detokenises: the caller decodes
the returned ids with the same tokenizer the transformers engine uses), so both engines see identical prompts and
produce comparable texts. Every EOS id is a stop id; a completion that stops keeps its stop id, as in
`sampling.to_rollout`.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, threads left unpinned): no spawned engine
core, so no `__main__` guard is needed, weights can be loaded into the served model directly (GRPO full-parameter
sync), and a Ray actor or a Ray Train rank holds its engine like any other object.

The prefix cache is on, and each call says whether its requests read it (`generate(prefix_cache=...)`). Evaluation
reads it (eval.shared_prompt): the n samples of a problem reuse its prompt's KV blocks. ESSA scoring and GRPO rollouts
do not: a fitness or a rollout must not depend on which blocks an earlier batch left in the cache (a cached block
and a fresh computation agree only up to float rounding), so a candidate scores the same on every replica and a
resumed run draws what an uninterrupted one drew. vLLM keys a block by its adapter as well as its tokens, so a
block cached under one candidate's adapter never serves another's (docs/engines.md).

LoRA: vLLM serves ranks 1, 8, 16, 32, 64, ...; `write_lora_adapter` pads a peft model's factors with zero rows and
columns up to the next served rank and folds peft's scaling into B, so the padded adapter computes the same
function exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from essaflow.generation.config import VLLMConfig

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The LoRA ranks vLLM serves; an adapter of another rank is padded with zeros up to the next one."""


def _vllm_logs_to_stderr() -> None:
    """vLLM logs to stdout by default; a command's stdout ends with its JSON line, so its logs go to stderr. Its
    handler is moved wherever vllm was first imported (VLLM_LOGGING_STREAM is read only then); a stream the user
    chose with VLLM_LOGGING_STREAM stays."""
    import logging
    import sys

    if "VLLM_LOGGING_STREAM" in os.environ:
        return
    for handler in logging.getLogger("vllm").handlers:
        if type(handler) is logging.StreamHandler and handler.stream is not sys.stderr:
            handler.setStream(sys.stderr)


def served_lora_rank(rank: int) -> int:
    """The smallest rank vLLM serves that is >= rank."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest served rank {VLLM_LORA_RANKS[-1]}")


def lora_factors(model: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """{module name: (A [r, in], B [out, r], scaling)} of a peft model's active adapter, as the model holds them."""
    from peft.tuners.lora import LoraLayer

    name = model.active_adapter
    out = {}
    for mod_name, module in model.named_modules():
        if isinstance(module, LoraLayer) and name in module.lora_A:
            a, b = (_whole(m[name].weight) for m in (module.lora_A, module.lora_B))
            out[mod_name] = (a, b, float(module.scaling[name]))
    return out


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A factor as one tensor: an FSDP shard outside the gathered policy is all-gathered (every rank calls this)."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach()


def write_lora_adapter(model: Any, out_dir: Path, rank: int | None = None) -> Path:
    """The peft model's active adapter as a vLLM-loadable adapter directory, rank padded to a served value.

    B is multiplied by peft's scaling and the config says lora_alpha = r, so vLLM's scaling is 1 and the padded
    zero rows of A / columns of B add nothing: the same W0 + scaling B A as the trainer's.
    """
    from safetensors.torch import save_file

    factors = lora_factors(model)
    if not factors:
        raise ValueError("the model has no LoRA layers to send to the engine")
    widest = max(a.shape[0] for a, _, _ in factors.values())
    r = served_lora_rank(rank or widest)
    tensors, targets = {}, set()
    for mod_name, (a, b, scaling) in factors.items():
        k = a.shape[0]
        tensors[f"{mod_name}.lora_A.weight"] = torch.nn.functional.pad(a.float(), (0, 0, 0, r - k)).contiguous()
        tensors[f"{mod_name}.lora_B.weight"] = torch.nn.functional.pad(b.float() * scaling, (0, r - k)).contiguous()
        targets.add(mod_name.rsplit(".", 1)[-1])
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": r, "target_modules": sorted(targets),
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "modules_to_save": None,
    }  # fmt: skip
    (out_dir / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return out_dir


def whole_prefills(model_dir: str, max_model_len: int | None) -> dict[str, Any]:
    """Engine arguments that keep every prompt's prefill in one step (no chunked prefill), for the CPU build.

    When vLLM chunks a seeded request's prompt over steps it rewinds that request's generator with `set_offset`,
    which a CPU `torch.Generator` does not have ("CPU Generator does not use offset"): seeded sampling (GRPO rollouts,
    evaluation samples) of prompts that fill more than one step's token budget fails. Without chunking, a step's
    budget must hold the longest sequence, so it is raised to the model length (vLLM does the same for MLA models
    on CPU)."""
    if max_model_len is None:
        max_model_len = json.loads((Path(model_dir) / "config.json").read_text())["max_position_embeddings"]
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 4096)}  # 4,096: its default


@dataclass
class Completion:
    """One engine completion: its token ids (the stop id kept when it stopped), whether it hit the cap, and the
    engine's log-probability of each sampled token (when asked for)."""

    token_ids: list[int]
    truncated: bool
    logprobs: list[float] | None = None


class VLLMEngine:
    """A vLLM `LLM` on a base checkpoint directory, with LoRA; generation and scoring by token ids.

    Adapters are registered with `adapter(dir)` (a fresh LoRA id each time, so new weights at the same path are
    loaded, never served from vLLM's adapter cache) and passed per request.
    """

    def __init__(
        self,
        model_dir: str,
        dtype: str,
        cfg: VLLMConfig,
        lora_rank: int = 8,
        seed: int = 0,
        sleep_mode: bool = False,
        lora: bool = True,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process (module doc)
        # the CPU build would pin this process's threads to cores and disable torch.set_num_threads for good; the
        # process also trains (GRPO) and shares its cores, so it keeps its threads (model.torch_threads)
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        from vllm import LLM

        _vllm_logs_to_stderr()

        set_threads, threads = torch.set_num_threads, torch.get_num_threads()

        self.model_dir = model_dir
        self.cfg = cfg
        self.sleep_mode = sleep_mode
        """vLLM sleep mode (a GPU engine whose memory the trainer takes back between rollouts)."""
        kwargs: dict[str, Any] = {}
        if cfg.kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(cfg.kv_cache_gib * 2**30)
        if cfg.quantization is not None:
            kwargs["quantization"] = cfg.quantization
        if cfg.max_model_len is not None:
            kwargs["max_model_len"] = cfg.max_model_len
        if not torch.cuda.is_available():
            kwargs |= whole_prefills(model_dir, cfg.max_model_len)
        if lora:  # LoRA wraps the linear layers; a full-parameter engine loads weights into plain ones
            kwargs.update(max_loras=cfg.max_loras, max_lora_rank=served_lora_rank(max(lora_rank, cfg.max_lora_rank)))
        self.llm = LLM(
            model=model_dir,
            dtype=dtype,
            seed=seed,
            enable_lora=lora,
            enable_prefix_caching=True,  # read per request: evaluation only (module doc)
            skip_tokenizer_init=True,  # ids in, ids out: the caller's HF tokenizer renders and decodes
            enforce_eager=cfg.enforce_eager,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=sleep_mode,  # after temperature: the distribution the token was drawn from
            **kwargs,
        )
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)
        self._next_id = 1
        self._dirs = tempfile.TemporaryDirectory(prefix="essaflow-vllm-lora-")

    def adapter(self, adapter_dir: str | Path, name: str = "adapter") -> Any:
        """A LoRA request for a peft adapter directory, under a fresh id (its weights are read on first use)."""
        from vllm.lora.request import LoRARequest

        lora_id, self._next_id = self._next_id, self._next_id + 1
        return LoRARequest(f"{name}-{lora_id}", lora_id, str(adapter_dir))

    def adapter_of(self, model: Any, name: str = "policy", rank: int | None = None) -> Any:
        """A LoRA request holding the peft model's current adapter tensors (rank padded: `write_lora_adapter`)."""
        target = Path(self._dirs.name) / f"{name}-{self._next_id}"
        return self.adapter(write_lora_adapter(model, target, rank), name)

    def forget(self, request: Any) -> None:
        """Drop an adapter from the engine and its directory from disk (ESSA candidates of a finished batch)."""
        self.llm.llm_engine.remove_lora(request.lora_int_id)
        if Path(request.lora_path).is_relative_to(self._dirs.name):
            shutil.rmtree(request.lora_path, ignore_errors=True)

    def generate(
        self,
        prompts: Sequence[list[int]],
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop: Sequence[int],
        seeds: Sequence[int] | None = None,
        adapters: Sequence[Any] | Any = None,
        logprobs: bool = False,
        prefix_cache: bool = False,
    ) -> list[Completion]:
        """One completion per prompt (token ids), each with its own seed and adapter (or one for all). prefix_cache:
        the requests reuse KV blocks the engine cached for the same prompt tokens and adapter (evaluation); off,
        every prompt is computed afresh (ESSA scoring, GRPO rollouts: module doc)."""
        from vllm import SamplingParams

        def params(seed: int | None) -> Any:
            return SamplingParams(
                n=1, temperature=temperature, top_p=top_p, top_k=0 if temperature > 0 else -1, seed=seed,
                max_tokens=max_new_tokens, stop_token_ids=list(stop), detokenize=False,
                logprobs=0 if logprobs else None, skip_reading_prefix_cache=not prefix_cache,
            )  # fmt: skip

        sampling = [params(s) for s in seeds] if seeds is not None else params(None)
        lora = list(adapters) if isinstance(adapters, (list, tuple)) else adapters
        outs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], sampling, lora_request=lora, use_tqdm=False
        )
        return [_completion(o.outputs[0], logprobs) for o in outs]

    def load_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Full-parameter sync: HF-named tensors into the served model, through vLLM's in-place reload (it maps
        fused q/k/v and gate/up, and redoes the kernel-format processing after loading: the CPU build repacks its
        linear weights, so a plain `load_weights` into the served layers fails). The engine core runs in this
        process, so `named` may be a generator: one tensor is materialised at a time."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named)})
        self.llm.reset_prefix_cache()


def _completion(out: Any, logprobs: bool) -> Completion:
    ids = list(out.token_ids)
    lps = None
    if logprobs and out.logprobs is not None:
        lps = [float(d[t].logprob) for d, t in zip(out.logprobs, ids)]
    return Completion(ids, out.finish_reason == "length", lps)


_ENGINES: dict[tuple[Any, ...], VLLMEngine] = {}


def shared_engine(model_dir: str, dtype: str, cfg: VLLMConfig, lora_rank: int = 8) -> VLLMEngine:
    """The process's engine for this checkpoint and settings, started on first use (a start costs ~16 s on CPU):
    evaluation before and after training, and the tests, share it. Not for full-parameter GRPO, whose weights
    change (it starts its own `VLLMEngine`)."""
    key = (str(model_dir), dtype, cfg.model_dump_json(), served_lora_rank(max(lora_rank, cfg.max_lora_rank)))
    if key not in _ENGINES:
        _ENGINES[key] = VLLMEngine(model_dir, dtype, cfg, lora_rank)
    return _ENGINES[key]
