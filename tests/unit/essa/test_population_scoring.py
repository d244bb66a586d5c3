"""A population scored in shared row batches (essa.batched_scoring) gives the fitness candidate-by-candidate scoring
gives: greedy decodes token for token, the gray-box fitnesses to float rounding; batches cut anywhere, and a sampled
fitness draws the same per-row stream for every candidate wherever it sits in the population.

On the calibrated tiny base with a small random LoRA (about 60% greedy exact match, so the candidates' accuracies
differ and a changed decode would show). Greedy decodes are equal here; a different CPU could flip an argmax that
two tokens tie on to within float rounding, which would move one candidate's accuracy by 1/b.
"""

import dataclasses

import numpy as np
import pytest
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.row_spectra import RowSpectra
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.generation.group_decode import common_prefix_length, decode_groups, decode_shared_prefix
from essaflow.generation.keyed_sampling import hash_keys
from essaflow.generation.sampling import encode_prompts, keyed_pick
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, save_adapter

IDX = np.arange(24)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    cfg = load_config(None, ["data.synthetic.num_problems=400", "data.eval_size=16", "sampling.max_new_tokens=6"])
    splits = prepare_splits(cfg.data)
    model = attach_lora(load_base_model(cfg.model), cfg.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    adapter = save_adapter(model, tmp_path_factory.mktemp("pop") / "adapter", load_tokenizer(cfg.model))
    # relative offsets of 30%, as the tiny preset searches; batches of 50 rows cut candidates' 24 rows anywhere
    return dataclasses.replace(scoring_spec(cfg, splits, adapter), offsets="relative", batch_size=50)


def candidates(dimension: int, n: int = 5) -> np.ndarray:
    return np.random.default_rng(0).normal(0, 0.3, (n, dimension)).astype(np.float32)


@pytest.mark.parametrize(
    ("fitness", "temperature", "tolerance"),
    [("accuracy", 0.0, 0.0), ("answer_probability", 0.0, 0.0), ("answer_probability", 1.0, 1e-5),
     ("answer_logprob", 1.0, 1e-4)],
)  # fmt: skip
def test_batched_fitness_equals_candidate_by_candidate(spec, fitness, temperature, tolerance):
    one = CandidateScorer(dataclasses.replace(spec, batched=False, fitness=fitness, temperature=temperature))
    many = CandidateScorer(dataclasses.replace(spec, batched=True, fitness=fitness, temperature=temperature))
    assert many.batched and not one.batched
    xs = candidates(one.ready()[0])
    expected, _ = one.score_range(xs, 0, IDX, 3)
    got, usage = many.score_range(xs, 0, IDX, 3)
    assert got == pytest.approx(expected, rel=tolerance, abs=tolerance)
    assert len(set(expected)) > 1, "the candidates differ, so a mixed-up row would show"
    assert usage.forward_tokens > 0


def test_rows_decode_as_their_candidate_does_alone(spec):
    """Token for token: rows of five candidates in one generate call against each candidate applied alone."""
    scorer = CandidateScorer(dataclasses.replace(spec, batched=False, merged=False))
    gen, svd = scorer.generator, scorer.svd
    xs = candidates(svd.dimension)
    enc = encode_prompts(gen.tokenizer, [spec.prompts[i] for i in IDX], gen.fmt)
    ids, mask = enc["input_ids"].repeat(len(xs), 1), enc["attention_mask"].repeat(len(xs), 1)
    kw = {"do_sample": False, "max_new_tokens": 6, "pad_token_id": gen.tokenizer.pad_token_id, "eos_token_id": gen.stop}
    with torch.no_grad(), RowSpectra(svd).population(list(xs)) as select:
        select(torch.arange(len(ids)) // len(IDX))
        together = gen.model.generate(input_ids=ids, attention_mask=mask, **kw)
    for c, x in enumerate(xs):
        svd.apply(x)
        with torch.no_grad():
            alone = gen.model.generate(**enc, **kw)
        rows = together[c * len(IDX) : (c + 1) * len(IDX), : alone.shape[1]]
        assert torch.equal(rows, alone), f"candidate {c}"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batches_and_places_do_not_change_a_candidates_fitness(spec, temperature):
    """Any batch size gives the same fitnesses, and a candidate scored alone gets what it gets in the population:
    at temperature > 0 every candidate's row j draws the same keyed noise (common random numbers)."""
    spec = dataclasses.replace(spec, temperature=temperature, batched=True)
    small, large = CandidateScorer(dataclasses.replace(spec, batch_size=7)), CandidateScorer(spec)
    xs = candidates(small.ready()[0])
    population, _ = small.score_range(xs, 0, IDX, 11)
    assert large.score_range(xs, 0, IDX, 11)[0] == population
    assert [large.score(i, x, IDX, 11)[1] for i, x in enumerate(xs)] == population
    same, _ = large.score_range(np.repeat(xs[:1], 3, axis=0), 0, IDX, 11)
    assert same == [population[0]] * 3


def test_batched_scoring_is_the_default_and_can_be_turned_off(spec):
    assert load_config(None, []).essa.batched_scoring and spec.batched
    assert not load_config(None, ["essa.batched_scoring=false"]).essa.batched_scoring


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_prefix_computed_once_per_candidate_decodes_as_whole_prompts(spec, temperature):
    """Prompts behind a common prefix (as a chat template's system turn is): the prefix runs once per candidate of
    the batch and its cache is copied to that candidate's rows; every row decodes as its candidate's whole prompt
    does alone, greedy and keyed-sampled. The tiny model's prompts share their BOS and first digit here (prompts of
    several lengths, so the masked gap between prefix and tail is exercised)."""
    scorer = CandidateScorer(dataclasses.replace(spec, batched=False, merged=False))
    gen, svd = scorer.generator, scorer.svd
    xs = candidates(svd.dimension, 3)
    prompts = [p for p in spec.prompts if p.startswith("3")][:24]
    n = len(prompts)
    enc = encode_prompts(gen.tokenizer, prompts, gen.fmt)
    ids, mask = enc["input_ids"].repeat(len(xs), 1), enc["attention_mask"].repeat(len(xs), 1)
    owner, stop, pad = torch.arange(len(ids)) // n, gen.stop, gen.tokenizer.pad_token_id
    assert common_prefix_length(ids, mask) >= 1 and len(set(mask.sum(dim=1).tolist())) > 1
    keys = hash_keys(5, torch.arange(n))
    with torch.no_grad(), RowSpectra(svd).population(list(xs)) as select:
        pick = keyed_pick(keys.repeat(len(xs)), temperature, 1.0)
        together = decode_shared_prefix(gen.model, ids, mask, owner, select, pick, 6, stop, pad)
    for c, x in enumerate(xs):
        svd.apply(x)
        alone = decode_groups(gen.model, enc["input_ids"], enc["attention_mask"], torch.arange(n),
                              keyed_pick(keys, temperature, 1.0), 6, stop, pad)  # fmt: skip
        rows = together[c * n : (c + 1) * n, : alone.shape[1]]
        assert torch.equal(rows, alone), f"candidate {c}"
    assert len({tuple(r) for r in together.tolist()}) > n, "the candidates decode differently"


def test_common_prefix_length_leaves_every_row_a_token_of_its_own():
    pad = 0
    ids = torch.tensor([[7, 8, 9, 1, 2], [pad, 7, 8, 9, 3], [pad, pad, 7, 8, 9]])
    mask = (ids != pad).long()
    assert common_prefix_length(ids, mask) == 2  # 7 8 shared; the shortest row keeps its 9
    assert common_prefix_length(ids[:2], mask[:2]) == 3
    assert common_prefix_length(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2, dtype=torch.long)) == 0
