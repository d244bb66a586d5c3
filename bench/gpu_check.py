"""The CUDA paths on one GPU, in one short run: vLLM sampling, bf16 training, ESSA population scoring.

Prepared for the `device` machine (one GPU, minutes of budget): every part is small, timed and printed as one JSON
line per part, and a part that fails prints its error and lets the others run. Nothing here runs in the test
suite (there is no GPU on CI); the CPU-visible logic of each path is unit-tested (tests/unit/model/test_gpu_paths.py).

1. vllm: the SFT adapter merged into plain weights (`models.export_merged`), loaded by vLLM in bfloat16; held-out
   greedy accuracy and pass@k next to the transformers backend on the same GPU, and tokens/s of both.
2. bf16_grpo: F-GRPO (gamma 1) with `model.dtype=bfloat16` on CUDA for a few steps: step time, reward before and
   after, LoRA weights moved and kept in float32 (peft keeps adapters in fp32 over a bf16 base).
3. essa_gpu: an ESSA population pool on a local Ray with one GPU (`essa.workers.gpus=1`, or `1/k` with
   --workers-per-gpu k): candidates/s against the same pool on CPU, and identical rankings up to bf16 noise.
4. quantization: a quantised frozen base for ESSA scoring (`model.quantization`, ESSA-v3 sec. 4.4.2: INT8/INT4
   lose < 1 point): held-out greedy accuracy at the SFT point and candidates/s of `CandidateScorer` for bf16, torchao
   int8 and int4 (the library's path, essaflow.model.quantization), and, when bitsandbytes is installed, its LLM.int8
   and NF4 bases (`BitsAndBytesConfig`, the QLoRA path) scored the same way for comparison. On --device cpu:
   float32 and int8 only (no int4 kernel, bitsandbytes skipped).
5. engines: bench/engine_throughput.py on the GPU: ESSA candidates/s and GRPO rollout tokens/s of transformers and
   vLLM on the same model and prompts, and their ratio, for a bf16 base and for an 8-bit and a 4-bit base
   (transformers: torchao int8/int4; vLLM: its fp8 and bitsandbytes 4-bit weights, the nearest it quantises in
   flight). Not yet run on a GPU.
6. fsdp2_bf16: FSDP2 (`fully_shard` per decoder layer and at the root, one rank) with float32 master weights and
   bfloat16 compute (`MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`) on a randomly initialised
   Llama-architecture model (--fsdp-hidden wide) for a few AdamW steps at lr 1e-6: step time, peak memory, the dtype
   of the parameters, and the share of decoder-layer weights each step changes, beside the same steps on a plain
   bfloat16 model (where most lr 1e-6 updates round away). It has not run on a GPU yet (docs/scaling.md).

    python bench/gpu_check.py                 # all parts (~3-6 min on an H100/H200 with the tiny model)
    python bench/gpu_check.py --parts vllm    # one part
    python bench/gpu_check.py --device cpu --parts bf16_grpo essa_gpu quantization --grpo-steps 3   # smoke, no GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from essaflow.config import PipelineConfig, load_config
from essaflow.data.prepare import prepare_splits
from essaflow.generation.config import VLLMConfig
from essaflow.generation.sampling import TransformersGenerator, VLLMGenerator
from essaflow.judging.evaluation import evaluate
from essaflow.model.loading import export_merged, load_model_with_adapter
from essaflow.training.warm_start import cached_sft_adapter

PARTS = ("vllm", "bf16_grpo", "essa_gpu", "quantization", "engines", "fsdp2_bf16")
ENGINE_BASES = {"bf16": ("none", None), "int8": ("int8", "fp8"), "int4": ("int4", "bitsandbytes")}
"""engines part: label -> (model.quantization of the transformers side, sampling.vllm.quantization of vLLM's)."""


def _tokens_per_s(texts: list[list[str]], seconds: float) -> float:
    return round(sum(len(t) for group in texts for t in group) / seconds, 1)  # character tokenizer: 1 char = 1 token


def part_vllm(cfg: PipelineConfig, splits, adapter: Path) -> dict:
    prompts = [p.prompt for p in splits.eval]
    out: dict = {}
    model, tok = load_model_with_adapter(cfg.model.model_copy(update={"device": "cuda"}), adapter)
    hf = TransformersGenerator(model, tok, cfg.sampling.batch_size)
    t0 = time.perf_counter()
    texts = hf.generate(prompts, n=8, temperature=1.0, max_new_tokens=cfg.sampling.max_new_tokens, seed=0)
    out["transformers_tok_s"] = _tokens_per_s(texts, time.perf_counter() - t0)
    out["transformers"] = evaluate(hf, splits.eval, cfg.eval, cfg.sampling).summary()
    del model, hf
    torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as d:
        merged = export_merged(cfg.model, adapter, Path(d) / "merged")
        t0 = time.perf_counter()
        vllm = VLLMGenerator(str(merged), "bfloat16", VLLMConfig(gpu_memory_utilization=0.3))
        out["vllm_load_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        texts = vllm.generate(prompts, n=8, temperature=1.0, max_new_tokens=cfg.sampling.max_new_tokens, seed=0)
        out["vllm_tok_s"] = _tokens_per_s(texts, time.perf_counter() - t0)
        out["vllm"] = evaluate(vllm, splits.eval, cfg.eval, cfg.sampling).summary()
    out["greedy_gap"] = round(out["vllm"]["greedy"] - out["transformers"]["greedy"], 4)
    return out


def part_engines(cfg: PipelineConfig, splits, adapter: Path, device: str) -> dict:
    """Both engines' ESSA candidates/s and rollout tokens/s, per base precision (bench/engine_throughput.py)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from engine_throughput import essa_rates, rollout_rates

    out: dict = {}
    bases = ENGINE_BASES if device == "cuda" else {"fp32": ("none", None)}
    for label, (hf_quant, vllm_quant) in bases.items():
        c = load_config("configs/tiny-essa.yaml", ["essa.population=32", "essa.minibatch=128"])
        c.model = c.model.model_copy(update={"device": device, "quantization": hf_quant,
                                             "dtype": "bfloat16" if device == "cuda" else "float32"})  # fmt: skip
        c.sampling.vllm = VLLMConfig(gpu_memory_utilization=0.2, quantization=vllm_quant)
        try:
            row = essa_rates(c, splits, adapter, 32, 128) | rollout_rates(c, splits, adapter, 64)
            row["essa_vllm_over_transformers"] = round(
                row["essa_candidates_per_s_vllm"] / row["essa_candidates_per_s_transformers"], 2
            )
            row["rollout_vllm_over_transformers"] = round(
                row["grpo_rollout_tokens_per_s_vllm"] / row["grpo_rollout_tokens_per_s_transformers"], 2
            )
        except Exception as err:  # one base's failure must not hide the others
            row = {"error": f"{type(err).__name__}: {err}"}
        out[label] = row
    return out


def part_bf16_grpo(cfg: PipelineConfig, splits, adapter: Path, steps: int, device: str) -> dict:
    from safetensors.torch import load_file

    from essaflow.grpo.loop import train_grpo

    run = cfg.model_copy(deep=True)
    run.model = run.model.model_copy(update={"dtype": "bfloat16", "device": device})
    run.grpo = run.grpo.model_copy(update={"device": device, "steps": steps, "eval_every": 0, "gamma": 1.0})
    with tempfile.TemporaryDirectory() as d:
        result = train_grpo(run, splits, adapter, Path(d) / "out")
        before, after = (
            load_file(str(adapter / "adapter_model.safetensors")),
            load_file(str(result.output_dir / "adapter_model.safetensors")),
        )
    rewards = [m["reward_mean"] for m in result.metrics if "reward_mean" in m]
    k = max(1, len(rewards) // 4)
    return {
        "steps": result.steps,
        "step_s_median": round(float(np.median([m["step_s"] for m in result.metrics if "step_s" in m])), 4),
        "reward_first_quarter": round(float(np.mean(rewards[:k])), 4),
        "reward_last_quarter": round(float(np.mean(rewards[-k:])), 4),
        "lora_max_change": max(float((after[n].float() - before[n].float()).abs().max()) for n in after),
        "lora_dtypes": sorted({str(t.dtype) for t in after.values()}),
    }


def part_essa_gpu(cfg: PipelineConfig, splits, adapter: Path, workers_per_gpu: int, device: str) -> dict:
    import ray

    from essaflow.cluster import gpus_per_worker
    from essaflow.essa.distributed import ray_population
    from essaflow.essa.prompt_sampler import MinibatchSampler, generation_seed
    from essaflow.essa.scoring_spec import scoring_spec

    gpu = device == "cuda"
    ray.init(address="local", num_cpus=4, num_gpus=1 if gpu else 0, include_dashboard=False, log_to_driver=False)
    out: dict = {}
    try:
        rng = np.random.default_rng(0)
        sampler = MinibatchSampler(len(splits.train), cfg.essa.minibatch, 0)
        batches = [sampler.next() for _ in range(4)]
        results = {}
        for label, gpus, dtype, workers in (
            ("cpu", 0.0, "float32", 1),
            ("gpu_bf16", gpus_per_worker(workers_per_gpu) if gpu else 0.0, "bfloat16", workers_per_gpu),
        ):
            run = cfg.model_copy(deep=True)
            run.model = run.model.model_copy(update={"dtype": dtype, "device": "cuda" if gpus else "cpu"})
            run.essa = run.essa.model_copy(update={"population": 16, "minibatch": 64})
            spec = scoring_spec(run, splits, adapter)
            pool = ray_population(spec, workers=workers, sync="vectors", gpus_per_worker=gpus)
            try:
                xs = [rng.normal(0, cfg.essa.sigma0, (cfg.essa.population, pool.dimension)) for _ in batches]
                pool.evaluate(xs[0], batches[0], 0)  # warm-up
                t0 = time.perf_counter()
                fits = [pool.evaluate(x, b, generation_seed(0, g))[0] for g, (x, b) in enumerate(zip(xs, batches))]
                wall = time.perf_counter() - t0
            finally:
                pool.close()
            rng = np.random.default_rng(0)  # the GPU pool scores the same candidates
            results[label] = np.concatenate(fits)
            out[f"{label}_candidates_per_s"] = round(sum(len(x) for x in xs) / wall, 2)
        a, b = results["cpu"], results["gpu_bf16"]
        out["fitness_rank_corr"] = round(
            float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1]), 4
        )
        out["fitness_max_abs_diff"] = round(float(np.abs(a - b).max()), 4)
        out["speedup"] = round(out["gpu_bf16_candidates_per_s"] / out["cpu_candidates_per_s"], 2)
    finally:
        ray.shutdown()
    return out


def _bnb_scorer(spec, kind: str):
    """A CandidateScorer over a base bitsandbytes quantised at load time (int8: LLM.int8, nf4: NF4, bf16 compute).

    The scorer is built as usual, with `models.load_model_with_adapter` swapped for a bitsandbytes load while it
    runs, so everything else (SVD bases, LoRA-path scoring, fitness) is the library's own code.
    """
    from unittest import mock

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from essaflow.essa.scorer import CandidateScorer
    from essaflow.model.loading import load_adapter, load_tokenizer, resolve_model_path

    bnb = (
        BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=["lm_head"])
        if kind == "int8"
        else BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    )

    def load(cfg, adapter_dir, quantize=True):
        base = AutoModelForCausalLM.from_pretrained(
            resolve_model_path(cfg.name_or_path), quantization_config=bnb, dtype=torch.bfloat16, device_map={"": 0}
        )
        return load_adapter(base, adapter_dir).eval(), load_tokenizer(cfg)

    with mock.patch("essaflow.model.loading.load_model_with_adapter", load):
        return CandidateScorer(dataclasses.replace(spec, merged=False))  # W0 + B'A' cannot go into a bnb weight


def part_quantization(cfg: PipelineConfig, splits, adapter: Path, device: str) -> dict:
    """Held-out greedy at the SFT point (offsets 0, every eval problem) and candidates/s on 128 of them."""
    from essaflow.essa.scorer import CandidateScorer
    from essaflow.essa.scoring_spec import scoring_spec, with_problems

    gpu = device == "cuda"
    dtype = "bfloat16" if gpu else "float32"
    variants = [(dtype, "none"), ("int8", "int8")] + ([("int4", "int4")] if gpu else [])
    try:
        import bitsandbytes  # noqa: F401

        bnb = gpu
    except ImportError:
        bnb = False
    out: dict = {"bitsandbytes": bnb}
    rng = np.random.default_rng(0)
    idx_all, idx_batch = np.arange(len(splits.eval)), np.arange(min(128, len(splits.eval)))
    xs = None
    for label, quant in variants + ([("bnb_int8", "bnb"), ("bnb_nf4", "bnb")] if bnb else []):
        run = cfg.model_copy(deep=True)
        q = quant if quant != "bnb" else "none"
        run.model = run.model.model_copy(update={"dtype": dtype, "device": device, "quantization": q})
        spec = with_problems(
            scoring_spec(run, splits, adapter, ship_adapter=False),
            splits.eval,
            fitness="accuracy",
            temperature=0.0,
        )
        try:
            scorer = _bnb_scorer(spec, label.removeprefix("bnb_")) if quant == "bnb" else CandidateScorer(spec)
            if xs is None:
                xs = rng.normal(0, cfg.essa.sigma0, (16, scorer.ready()[0])).astype(np.float32)
            out[f"{label}_greedy"] = round(scorer.score(0, np.zeros_like(xs[0]), idx_all, 0)[1], 4)
            scorer.score(0, xs[0], idx_batch, 0)  # warm-up
            t0 = time.perf_counter()
            for i, x in enumerate(xs):
                scorer.score(i, x, idx_batch, 0)
            out[f"{label}_candidates_per_s"] = round(len(xs) / (time.perf_counter() - t0), 2)
            del scorer
        except Exception as err:  # one scheme without a kernel must not hide the others
            out[f"{label}_error"] = f"{type(err).__name__}: {err}"[:300]
        if gpu:
            torch.cuda.empty_cache()
    ref = out.get(f"{dtype}_greedy")
    for label, _ in variants[1:] + ([("bnb_int8", ""), ("bnb_nf4", "")] if bnb else []):
        if ref is not None and f"{label}_greedy" in out:
            out[f"{label}_greedy_gap"] = round(out[f"{label}_greedy"] - ref, 4)
            out[f"{label}_speedup"] = round(out[f"{label}_candidates_per_s"] / out[f"{dtype}_candidates_per_s"], 2)
    return out


def _llama(hidden: int, layers: int, vocab: int = 32000):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = max(1, hidden // 128)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 64 * 64, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, vocab_size=vocab,
                      max_position_embeddings=1024)  # fmt: skip
    return LlamaForCausalLM(cfg).float()


def _changed_share(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    """Share of the decoder layers' weight elements that differ from `before` (full tensors: one rank holds every
    shard). Embedding rows of tokens a batch lacks get no gradient, so they are left out."""
    changed = total = 0
    for name, p in model.named_parameters():
        if ".layers." not in name:
            continue
        now = p.full_tensor() if hasattr(p, "full_tensor") else p
        changed += int((now.detach().float() != before[name]).sum())
        total += now.numel()
    return round(changed / total, 4)


def _train_steps(model, steps: int, device: str, seq: int, batch: int) -> tuple[list[float], list[float]]:
    """AdamW lr 1e-6 steps on random tokens: (seconds of each step, share of weights each step changed)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    times, shares = [], []
    for _ in range(steps):
        before = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().clone()
                  for n, p in model.named_parameters()}  # fmt: skip
        ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen).to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(round(time.perf_counter() - t0, 4))
        shares.append(_changed_share(before, model))
    return times, shares


def part_fsdp2_bf16(steps: int, device: str, hidden: int, layers: int, seq: int, batch: int) -> dict:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    out: dict = {"hidden": hidden, "layers": layers, "seq": seq, "batch": batch, "lr": 1e-6}
    with tempfile.TemporaryDirectory() as d:
        backend = "nccl" if device == "cuda" else "gloo"
        owns = not dist.is_initialized()  # a one-member group this process already has (e.g. vLLM's) serves too
        if owns:
            dist.init_process_group(backend, init_method=f"file://{d}/pg", rank=0, world_size=1)
        elif dist.get_world_size() != 1:
            raise RuntimeError("fsdp2_bf16 runs on one rank; this process is in a larger process group")
        try:
            model = _llama(hidden, layers).to(device)
            out["parameters"] = sum(p.numel() for p in model.parameters())
            mesh = init_device_mesh(device, (1,))
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times, shares = _train_steps(model, steps, device, seq, batch)
            out["fsdp_param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
            out["fsdp_param_kinds"] = sorted({type(p).__name__ for p in model.parameters()})
            out["fsdp_step_s"], out["fsdp_changed_share"] = times, shares
            if device == "cuda":
                out["fsdp_peak_gib"] = round(torch.cuda.max_memory_allocated() / 1024**3, 2)
            del model
        finally:
            if owns:
                dist.destroy_process_group()
    plain = _llama(hidden, layers).to(device=device, dtype=torch.bfloat16)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    out["bf16_step_s"], out["bf16_changed_share"] = _train_steps(plain, steps, device, seq, batch)
    if device == "cuda":
        out["bf16_peak_gib"] = round(torch.cuda.max_memory_allocated() / 1024**3, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-fgrpo.yaml")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--grpo-steps", type=int, default=30)
    ap.add_argument("--workers-per-gpu", type=int, default=2)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run of the script")
    ap.add_argument("--fsdp-steps", type=int, default=5)
    ap.add_argument("--fsdp-hidden", type=int, default=2048, help="fsdp2_bf16: model width (2048: ~0.6B parameters)")
    ap.add_argument("--fsdp-layers", type=int, default=8)
    ap.add_argument("--fsdp-seq", type=int, default=512)
    ap.add_argument("--fsdp-batch", type=int, default=4)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible: this script checks the GPU paths (--device cpu smokes)"}))
        return 2
    cfg = load_config(args.config, [])
    if set(args.parts) - {"fsdp2_bf16"}:  # the other parts start from the tiny task's SFT adapter
        splits = prepare_splits(cfg.data)
        adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(json.dumps({"device": name, "torch": torch.__version__}), flush=True)
    failed = 0
    for part in args.parts:
        t0 = time.perf_counter()
        try:
            if part == "vllm":
                res = part_vllm(cfg, splits, adapter)
            elif part == "bf16_grpo":
                res = part_bf16_grpo(cfg, splits, adapter, args.grpo_steps, args.device)
            elif part == "fsdp2_bf16":
                res = part_fsdp2_bf16(args.fsdp_steps, args.device, args.fsdp_hidden, args.fsdp_layers,
                                      args.fsdp_seq, args.fsdp_batch)  # fmt: skip
            elif part == "engines":
                res = part_engines(cfg, splits, adapter, args.device)
            elif part == "essa_gpu":
                res = part_essa_gpu(cfg, splits, adapter, args.workers_per_gpu, args.device)
            else:
                res = part_quantization(cfg, splits, adapter, args.device)
            print(
                json.dumps({"part": part, "ok": True, "wall_s": round(time.perf_counter() - t0, 1), **res}), flush=True
            )
        except Exception as err:  # report and go on: one broken path must not hide the others
            failed += 1
            tb = traceback.format_exc(limit=6)
            print(
                json.dumps({"part": part, "ok": False, "error": f"{type(err).__name__}: {err}", "trace": tb}),
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
