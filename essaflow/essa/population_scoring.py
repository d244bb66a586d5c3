"""A worker's share of ESSA candidates scored in batches of rows on the transformers engine (`essa.batched_scoring`).

The share's rows (candidates x minibatch prompts x fitness samples, candidate-major) are cut into batches of
`sampling.batch_size` rows, whatever candidate each row belongs to; each batch is one generate call (accuracy) or
one teacher-forced forward pass (the gray-box fitnesses) in which every row runs with its candidate's singular values
(`row_spectra.py`). A candidate's fitness is then computed from its rows exactly as `fitness.py` computes it from a
one-candidate batch, so batched and candidate-by-candidate scoring agree up to float rounding (greedy decodes and
argmax checks are equal unless two tokens tie to within it; `tests/unit/essa/test_population_scoring.py`).

Sampled fitness (fitness_temperature > 0) changes stream against candidate-by-candidate scoring: a row's tokens are
drawn by Gumbel-max with noise keyed by (sampling seed, the row's place in its candidate's minibatch, position,
token), the batch-invariant sampler of GRPO rollouts (`essaflow.grpo.rollout.GumbelSampler`), instead of torch's
global RNG seeded per candidate. Every candidate's row j sees the same noise (common random numbers, as the vLLM
engine's per-row seeds give), and no draw depends on the batch it fell in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from essaflow.essa.fitness import GRAY_BOX, MinibatchFitness, mean_reward
from essaflow.essa.row_spectra import RowSpectra
from essaflow.essa.scoring_spec import ScoringSpec
from essaflow.generation.group_decode import decode_shared_prefix
from essaflow.generation.keyed_sampling import hash_keys
from essaflow.generation.sampling import encode_prompts, keyed_pick, to_rollout
from essaflow.usage import Usage

Select = Callable[[torch.Tensor], None]


class PopulationScoring:
    """Candidates' fitnesses from shared batches of rows, each row with its candidate's singular values."""

    batched = True
    """A run of candidates is scored together (one cost record for the run)."""
    merged = False  # the base weights stay W0; the LoRA term is added per row

    def __init__(self, spec: ScoringSpec, svd, fitness: MinibatchFitness):
        self.spec = spec
        self.fitness = fitness
        self.generator = fitness.generator
        self.rows = RowSpectra(svd)
        self.batch_rows = max(1, spec.batch_size)
        """Rows per generate call or forward pass (sampling.batch_size): bounds activation and KV-cache memory."""

    def __call__(self, xs: list[np.ndarray], prompt_idx: np.ndarray, seed: int, usage: Usage) -> list[float]:
        """One float32-rounded fitness per candidate of `xs`, all scored on the minibatch `prompt_idx`."""
        with torch.no_grad(), self.rows.population(list(xs)) as select:
            if self.spec.fitness in GRAY_BOX:
                values = self.gray_box(len(xs), prompt_idx, select, usage)
            else:
                values = self.accuracy(len(xs), prompt_idx, seed, select, usage)
        return [float(np.float32(v)) for v in values]

    def batches(self, candidates: int, per_candidate: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(candidate of each row, the row's place in its candidate's rows) per batch, candidate-major."""
        total = candidates * per_candidate
        for start in range(0, total, self.batch_rows):
            rows = torch.arange(start, min(start + self.batch_rows, total))
            yield rows // per_candidate, rows % per_candidate

    def accuracy(self, count: int, prompt_idx: np.ndarray, seed: int, select: Select, usage: Usage) -> list[float]:
        """Mean reward of each candidate's decoded rows (`MinibatchFitness.accuracy`, one batch for many)."""
        m, gen, spec = self.spec.fitness_samples, self.generator, self.spec
        rows = [i for i in prompt_idx for _ in range(m)]
        enc = encode_prompts(gen.tokenizer, [spec.prompts[i] for i in rows], gen.fmt)  # one candidate's rows
        outs, places = [], []
        for cand, place in self.batches(count, len(rows)):
            outs.append(self.decode(enc["input_ids"][place], enc["attention_mask"][place], cand, place, seed, select))
            places.append(place)
        width = max(o.shape[1] for o in outs)
        pad = gen.tokenizer.pad_token_id
        completion = torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1]), value=pad) for o in outs])
        place = torch.cat(places)
        r = to_rollout(gen.tokenizer, {k: v[place] for k, v in enc.items()}, completion, gen.stop)
        generated = int(r.completion_mask.sum())
        usage.generated_tokens += generated
        usage.forward_tokens += int(r.prompt_mask.sum()) + generated
        problems = [self.fitness.problems[i] for i in rows]
        n = len(rows)
        reward = self.fitness.reward
        return [mean_reward(reward, r.texts[c * n : (c + 1) * n], problems, usage) for c in range(count)]

    def decode(
        self, ids: torch.Tensor, mask: torch.Tensor, cand: torch.Tensor, place: torch.Tensor, seed: int, select: Select
    ) -> torch.Tensor:
        """One batch's completion ids, greedy or keyed sampling, each row under its candidate's spectra. The
        prompts' common prefix (a chat template's system turn) is computed once per candidate of the batch, not once
        per row (`decode_shared_prefix`): the same tokens as per-row decoding up to float rounding."""
        gen, spec = self.generator, self.spec
        device = next(gen.model.parameters()).device
        width = int(mask.sum(dim=1).max())  # columns left of it are padding in every row of the batch
        pick = keyed_pick(hash_keys(seed, place), spec.temperature, spec.top_p)  # argmax at temperature 0
        out = decode_shared_prefix(
            gen.model, ids[:, -width:].to(device), mask[:, -width:].to(device), cand.to(device), select, pick,
            spec.max_new_tokens, gen.stop, gen.tokenizer.pad_token_id,
        )  # fmt: skip
        return out.cpu()

    def gray_box(self, count: int, prompt_idx: np.ndarray, select: Select, usage: Usage) -> list[float]:
        """Each candidate's mean teacher-forced score (`MinibatchFitness.answer_probability`, one pass for many)."""
        ids, mask, labels = self.fitness.teacher_forced(prompt_idx)
        model = self.generator.model
        device = next(model.parameters()).device
        scores = []
        for cand, place in self.batches(count, ids.shape[0]):
            select(cand)
            logits = model(input_ids=ids[place].to(device), attention_mask=mask[place].to(device)).logits
            scores.append(self.fitness.row_scores(logits[:, :-1].float(), labels[place, 1:].to(device)))
        usage.forward_tokens += int(mask.sum()) * count
        values, n = torch.cat(scores), ids.shape[0]
        return [float(values[c * n : (c + 1) * n].mean()) for c in range(count)]
