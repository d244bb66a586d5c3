"""eval.shared_prompt: pass@k evaluation that prefills each prompt once gives the per-sample path's greedy decodes
exactly and its sampled completions in distribution (the same pass@k within noise), on a random stream of its own
that a fixed seed reproduces whatever the batch size."""

from collections import Counter

import numpy as np
import pytest

from essaflow.config import EvalConfig, ModelConfig, SamplingConfig
from essaflow.data.synthetic import synthetic_problems
from essaflow.gate.digests import protocol_digest
from essaflow.generation.sampling import TransformersGenerator, VLLMGenerator
from essaflow.judging.model_eval import evaluate_transformers
from essaflow.model.loading import load_base_model, load_tokenizer, resolve_model_path

N = 32


@pytest.fixture(scope="module")
def tiny():
    cfg = ModelConfig()
    return load_base_model(cfg), load_tokenizer(cfg)


@pytest.fixture(scope="module")
def problems():
    """1-3 digit operands: prompts of different lengths, left-padded to one width in every batch."""
    out = synthetic_problems(48, seed=21)
    assert len({len(p.prompt) for p in out}) > 2
    return out


def _eval(tiny, problems, shared: bool, seed: int = 1234, batch_size: int = 512):
    model, tok = tiny
    eval_cfg = EvalConfig(
        samples_per_problem=N, ks=[1, 8, N], seed=seed, reward="exact_match", shared_prompt=shared,
        samples_saved_per_problem=N,
    )  # fmt: skip
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, batch_size=batch_size)
    return evaluate_transformers(model, tok, problems, eval_cfg, sampling)


@pytest.fixture(scope="module")
def reports(tiny, problems):
    """Shared-prompt evaluation, and the per-sample path at two seeds (their gap is the sampling noise)."""
    return _eval(tiny, problems, True), _eval(tiny, problems, False), _eval(tiny, problems, False, seed=99)


def _completions(report) -> list[list[str]]:
    """Each problem's N sampled completions, as the report keeps them."""
    return [[c["text"] for c in row["completions"]] for row in report.samples]


def _completion_gap(a: list[list[str]], b: list[list[str]]) -> float:
    """Mean over problems of the total-variation distance between two sets of completions' frequencies."""
    gaps = []
    for texts_a, texts_b in zip(a, b):
        fa, fb = Counter(texts_a), Counter(texts_b)
        gaps.append(sum(abs(fa[t] - fb[t]) for t in fa.keys() | fb.keys()) / (2 * N))
    return float(np.mean(gaps))


@pytest.mark.parametrize("batch_size", [512, 6], ids=["whole-groups", "groups-split-across-batches"])
def test_greedy_decodes_are_the_same_on_both_paths(tiny, problems, batch_size):
    model, tok = tiny
    prompts = [p.prompt for p in problems]
    shared, per_sample = (TransformersGenerator(model, tok, batch_size, shared_prompt=s) for s in (True, False))
    a = shared.sample(prompts, n=4, temperature=0.0, max_new_tokens=6)
    b = per_sample.sample(prompts, n=4, temperature=0.0, max_new_tokens=6)
    assert a.texts == b.texts and a.truncated == b.truncated
    assert len({row[0] for row in a.texts}) > 10, "the prompts get different answers: each row read its own prompt"


def test_greedy_accuracy_is_the_same_on_both_paths(reports):
    shared, per_sample, _ = reports
    assert shared.greedy == per_sample.greedy and shared.greedy_correct == per_sample.greedy_correct


def test_sampled_pass_at_k_agrees_with_the_per_sample_path(reports):
    """Paired by problem, the shared path's correct counts differ from the per-sample path's by no more than two
    per-sample runs at different seeds differ (4 paired standard errors); pass@1 is neither 0 nor 1, so there is
    something to agree on."""
    shared, per_sample, other_seed = reports
    assert 0.1 < per_sample.pass_at_k["1"] < 0.9, per_sample.pass_at_k
    diff = (np.array(shared.correct_counts) - np.array(per_sample.correct_counts)) / N
    se = diff.std(ddof=1) / np.sqrt(len(diff)) + 1e-9
    assert abs(diff.mean()) < 4 * se, (shared.pass_at_k, per_sample.pass_at_k)
    for k in ("1", "8", str(N)):
        noise = abs(per_sample.pass_at_k[k] - other_seed.pass_at_k[k])
        assert abs(shared.pass_at_k[k] - per_sample.pass_at_k[k]) < 3 * noise + 0.05, (k, shared, per_sample)


def test_sampled_completions_follow_the_per_sample_distribution(reports):
    """Per problem, the completions' frequencies are as far from the per-sample path's as two per-sample seeds are
    from each other; each problem's greedy decode repeated N times (no sampling), or every problem's completions
    read one problem later (rows of another prompt), is far further."""
    shared, per_sample, other_seed = (_completions(r) for r in reports)
    noise = _completion_gap(per_sample, other_seed)
    gap = _completion_gap(shared, per_sample)
    assert gap < 1.3 * noise, (gap, noise)
    greedy = [[row["greedy"]["text"]] * N for row in reports[0].samples]
    assert _completion_gap(greedy, per_sample) > 2 * noise, "the check tells greedy decodes from samples"
    assert _completion_gap(shared[1:], per_sample[:-1]) > 2 * noise, "and one prompt's samples from another's"


def test_a_fixed_seed_draws_the_same_samples_whatever_the_batch_size(tiny, problems, reports):
    shared = reports[0]
    again = _eval(tiny, problems, True, batch_size=40)  # 40 rows a batch: a problem's 32 samples span two batches
    assert again.correct_counts == shared.correct_counts and again.pass_at_k == shared.pass_at_k
    assert _eval(tiny, problems, True, seed=7).correct_counts != shared.correct_counts


def test_the_sampling_stream_is_part_of_the_protocol():
    """Changing eval.shared_prompt changes which samples a seed draws, so a champion's stored counts are not reused
    across it (the gate re-evaluates)."""
    assert EvalConfig().shared_prompt is True
    sampling = SamplingConfig()
    on, off = (protocol_digest(EvalConfig(shared_prompt=s), sampling) for s in (True, False))
    assert on != off


def test_evaluation_on_vllm_reads_the_prefix_cache_as_eval_shared_prompt_says(monkeypatch, tiny):
    """The generator asks the engine to read its prefix cache with eval.shared_prompt, and not without."""
    calls = []

    class RecordingEngine:
        def generate(self, prompts, *args, prefix_cache=False, **kw):
            calls.append(prefix_cache)
            return [type("Out", (), {"token_ids": [1], "truncated": False})() for _ in prompts]

    monkeypatch.setattr("essaflow.generation.sampling.shared_engine", lambda *a, **kw: RecordingEngine())
    model_dir = resolve_model_path(ModelConfig().name_or_path)
    for shared in (True, False):
        VLLMGenerator(model_dir, tokenizer=tiny[1], shared_prompt=shared).sample(["1+2="], n=3)
    assert calls == [True, False]
