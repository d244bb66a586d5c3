"""In-process scoring: merged and LoRA paths agree, answer_probability is P(reference), bytes are counted."""

import dataclasses

import numpy as np
import pytest
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.metrics import payload_bytes
from essaflow.essa.population import LocalPopulation
from essaflow.essa.scorer import CandidateScorer, NotLoaded
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.model.loading import attach_lora, load_base_model, load_model_with_adapter, load_tokenizer, save_adapter
from tests.support.essa_tiny import make_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg, splits, adapter = make_tiny(tmp_path_factory.mktemp("essa-pop"))
    return cfg, splits, adapter, scoring_spec(cfg, splits, adapter)


@pytest.mark.parametrize("fitness", ["accuracy", "answer_probability"])
def test_merged_scoring_matches_the_lora_path(tiny, fitness):
    *_, spec = tiny
    lora = CandidateScorer(dataclasses.replace(spec, merged=False, fitness=fitness))
    merged = CandidateScorer(dataclasses.replace(spec, merged=True, fitness=fitness))
    idx = np.arange(24)
    for x in np.random.default_rng(0).normal(0, 0.3, (4, lora.ready()[0])).astype(np.float32):
        assert merged.score(0, x, idx, 3)[1] == pytest.approx(lora.score(0, x, idx, 3)[1], abs=1e-5)


def test_answer_probability_is_the_teacher_forced_probability_of_the_reference(tiny):
    cfg, splits, adapter, spec = tiny
    scorer = CandidateScorer(dataclasses.replace(spec, fitness="answer_probability", temperature=1.0))
    idx = np.array([5, 0, 17])
    got = scorer.score(0, np.zeros(scorer.ready()[0], np.float32), idx, 0)[1]
    model, tok = load_model_with_adapter(cfg.model, adapter)
    probs = []
    for i in idx:
        p_ids = tok(spec.prompts[i], add_special_tokens=False)["input_ids"]
        a_ids = tok(spec.answers[i], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([p_ids + a_ids])).logits[0], -1)
        probs.append(float(np.exp(sum(logp[len(p_ids) - 1 + j, t].item() for j, t in enumerate(a_ids)))))
    assert got == pytest.approx(np.mean(probs), rel=1e-4)


def test_local_population_scores_in_order_and_counts_payload_bytes(tiny):
    *_, spec = tiny
    pop = LocalPopulation(spec)
    x = np.random.default_rng(1).normal(0, 0.3, (6, pop.dimension))
    idx = np.arange(24)
    fitness, stats = pop.evaluate(x, idx, seed=0)
    single = [pop.scorer.score(i, x[i].astype(np.float32), idx, 0)[1] for i in (4, 1)]
    assert [fitness[4], fitness[1]] == single
    per_call = payload_bytes((0, x[0].astype(np.float32), idx, 0))
    assert per_call > 4 * pop.dimension, "the float32 vector dominates what is sent"
    assert stats.bytes_sent == pytest.approx(6 * per_call, rel=0.01) and stats.bytes_received > 0


def test_answer_probability_at_temperature_0_is_greedy_exact_match(tmp_path):
    """On the calibrated tiny base (about 60% greedy): the teacher-forced argmax check equals decoding + reward."""
    cfg = load_config(None, ["data.synthetic.num_problems=400", "data.eval_size=16", "sampling.max_new_tokens=6"])
    splits = prepare_splits(cfg.data)
    model = attach_lora(load_base_model(cfg.model), cfg.model)  # B = 0: the base model itself
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01, generator=torch.Generator().manual_seed(0))
    adapter = save_adapter(model, tmp_path / "adapter", load_tokenizer(cfg.model))
    spec = dataclasses.replace(scoring_spec(cfg, splits, adapter), temperature=0.0)
    idx = np.arange(96)
    decoded = CandidateScorer(dataclasses.replace(spec, fitness="accuracy"))
    forced = CandidateScorer(dataclasses.replace(spec, fitness="answer_probability"))
    zero = np.zeros(decoded.ready()[0], np.float32)
    accuracy = decoded.score(0, zero, idx, 0)[1]
    assert 0.2 < accuracy < 0.95, "a meaningful mix of right and wrong answers"
    assert forced.score(0, zero, idx, 0)[1] == pytest.approx(accuracy, abs=1e-12)


def test_a_worker_on_another_machine_rebuilds_the_adapter_from_the_spec(tiny):
    *_, spec = tiny
    assert "adapter_model.safetensors" in spec.adapter_files and "adapter_config.json" in spec.adapter_files
    here = CandidateScorer(spec)
    elsewhere = CandidateScorer(dataclasses.replace(spec, adapter_dir="/nonexistent/driver/cache/sft/abc"))
    idx = np.arange(24)
    for x in np.random.default_rng(1).normal(0, 0.3, (3, here.ready()[0])).astype(np.float32):
        assert elsewhere.score(0, x, idx, 5)[:2] == here.score(0, x, idx, 5)[:2]
    # without the files, a worker that cannot see the driver's disk says what must be shared
    with pytest.raises(FileNotFoundError, match="cannot read the SFT adapter at .*ESSAFLOW_CACHE_DIR must be one"):
        CandidateScorer(dataclasses.replace(spec, adapter_dir="/nonexistent/x", adapter_files={}))


def test_a_scorer_built_empty_loads_with_its_first_ready_call(tiny):
    """A Ray actor's scorer is built without arguments (no constructor argument for Ray to keep for a restart) and
    loads with `ready(spec)`; work before that, as a restarted actor would get, is NotLoaded."""
    *_, spec = tiny
    empty, idx = CandidateScorer(), np.arange(24)
    with pytest.raises(NotLoaded):
        empty.score(0, np.zeros(4, np.float32), idx, 0)
    with pytest.raises(NotLoaded, match="pass the ScoringSpec"):
        empty.ready()
    loaded = CandidateScorer(spec)
    assert empty.ready(spec) == loaded.ready() and empty.ready() == loaded.ready()  # loaded once, then answers
    x = np.random.default_rng(2).normal(0, 0.3, loaded.ready()[0]).astype(np.float32)
    assert empty.score(0, x, idx, 3)[:2] == loaded.score(0, x, idx, 3)[:2]


def test_a_ray_scorer_takes_its_ray_cpus_as_threads_and_a_local_one_the_models(tiny):
    cfg, splits, adapter, _ = tiny
    two = cfg.model_copy(deep=True)
    two.model.torch_threads = 2  # the driver's evaluation and SFT on both cores
    two.essa.workers.ray = True
    assert scoring_spec(two, splits, adapter).model["torch_threads"] == 1  # essa.workers.cpus = 1: one each
    two.essa.workers.cpus = 4
    assert scoring_spec(two, splits, adapter).model["torch_threads"] == 2  # never more than model.torch_threads
    two.essa.workers.ray = False
    two.essa.workers.cpus = 1
    assert scoring_spec(two, splits, adapter).model["torch_threads"] == 2  # in the driver: the model's own
