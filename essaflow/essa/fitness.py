"""An ESSA candidate's fitness on one minibatch, measured on the model as its offsets left it (docs/algorithms.md
sec. 2.7, 6.7).

- `accuracy` (the paper's black-box reward, ESSA-v3 sec. 3.2): decode `essa.fitness_samples` completions per prompt
  at `essa.fitness_temperature` (default 0 = greedy) with the generation's sampling seed, all b prompts in one
  batched call; fitness = the mean reward (`eval.reward`).
- `answer_probability` (an option beside the paper's accuracy, not a black-box reward: it needs the reference
  answer): the probability that decoding at temperature T produces the reference answer + EOS, computed exactly by
  one teacher-forced forward pass over the b prompts. For exact match it is the expected reward of one completion at
  temperature T (T = 1: expected pass@1), so it has no decoding noise and far fewer ties; T < 1 sharpens it towards
  greedy accuracy, which it equals at T = 0 (the reference is the argmax at every answer step).
- `answer_logprob`: the mean log-probability of the reference (the SFT objective, a surrogate rather than an
  expected reward), for measuring the subspace's ceiling the way `bench/essa_ceiling.py` does, without gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from essaflow.data.schema import Problem
from essaflow.essa.scoring_spec import ScoringSpec, spec_problems
from essaflow.generation.prompt_format import prompt_ids, target_ids
from essaflow.judging.judge import Judge
from essaflow.usage import Usage

GRAY_BOX = ("answer_probability", "answer_logprob")


def mean_reward(judge: Judge, texts: Sequence[str], problems: Sequence[Problem], usage: Usage) -> float:
    """The accuracy fitness of decoded completions: their mean reward (not thresholded: a graded reward's partial
    credit counts, ESSA-v3 sec. 3.2's black-box reward); the reward's components are tallied into `usage`."""
    scores = judge.score(list(texts), list(problems))
    usage.components.add_scores(scores.components, len(scores.rewards))
    return scores.mean()


class MinibatchFitness:
    """`essa.fitness` of the model `generator` holds, on the prompts `prompt_idx` of the training split."""

    def __init__(self, spec: ScoringSpec, generator, judge: Judge):
        self.spec = spec
        self.generator = generator
        self.reward = judge
        self.problems = spec_problems(spec)
        self._answer_ids: list[tuple[list[int], list[int]]] | None = None

    def __call__(self, prompt_idx: np.ndarray, seed: int, usage: Usage) -> float:
        if self.spec.fitness in GRAY_BOX:
            return self.answer_probability(prompt_idx, usage)
        return self.accuracy(prompt_idx, seed, usage)

    def accuracy(self, prompt_idx: np.ndarray, seed: int, usage: Usage) -> float:
        """Mean reward of `fitness_samples` completions per prompt, decoded with the generation's seed."""
        m = self.spec.fitness_samples
        r = self.generator.rollout(  # what generator.sample does, keeping the token counts
            [self.spec.prompts[i] for i in prompt_idx for _ in range(m)],
            temperature=self.spec.temperature,
            top_p=self.spec.top_p,
            max_new_tokens=self.spec.max_new_tokens,
            seed=seed,
        )
        generated = int(r.completion_mask.sum())
        usage.generated_tokens += generated
        usage.forward_tokens += int(r.prompt_mask.sum()) + generated
        return mean_reward(self.reward, r.texts, [self.problems[i] for i in prompt_idx for _ in range(m)], usage)

    def answer_tokens(self) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, answer ids + EOS) of every training prompt, tokenized once: the prompt as generation feeds
        it, the answer closed as SFT closes it (prompt_format)."""
        if self._answer_ids is None:  # per-call tokenization would cost more than the forward pass
            tok, fmt, stop = self.generator.tokenizer, self.generator.fmt, self.generator.stop
            enc_p = prompt_ids(tok, self.spec.prompts, fmt)
            enc_a = [target_ids(tok, p, a, fmt, stop) for p, a in zip(self.spec.prompts, self.spec.answers)]
            self._answer_ids = list(zip(enc_p, enc_a))
        return self._answer_ids

    @torch.no_grad()
    def answer_probability(self, prompt_idx: np.ndarray, usage: Usage | None = None) -> float:
        """Mean over the minibatch of P_T(reference answer + EOS | prompt), teacher forced, one forward pass
        (`answer_logprob`: the mean log P at temperature 1)."""
        ids, mask, labels = self.teacher_forced(prompt_idx)
        model = self.generator.model
        device = next(model.parameters()).device
        if usage is not None:
            usage.forward_tokens += int(mask.sum())
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
        return float(self.row_scores(logits, labels[:, 1:].to(device)).mean())

    def teacher_forced(self, prompt_idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input ids, attention mask, labels) of the minibatch's prompt + reference rows, right padded."""
        return self._teacher_forced_rows([self.answer_tokens()[i] for i in prompt_idx])

    def row_scores(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each row's gray-box score from next-token logits [B, T, V] (float) and the labels they predict [B, T]
        (-100 off the answer); the fitness is their mean."""
        scored = labels != -100
        target = labels.clamp(min=0).unsqueeze(-1)
        if self.spec.fitness == "answer_logprob":  # log P(reference) at temperature 1: the SFT objective
            logp = torch.log_softmax(logits, dim=-1).gather(-1, target).squeeze(-1)
            return (logp * scored).sum(dim=1)
        if self.spec.temperature == 0:  # greedy: the reference is decoded iff it is the argmax at every step
            hit = (logits.argmax(dim=-1) == labels) | ~scored
            return hit.all(dim=1).double()
        logp = torch.log_softmax(logits / self.spec.temperature, dim=-1).gather(-1, target).squeeze(-1)
        return torch.exp((logp * scored).sum(dim=1))

    def _teacher_forced_rows(self, rows: list[tuple[list[int], list[int]]]):
        """(input ids, attention mask, labels) of prompt + answer rows, right padded; labels only on the answer."""
        width = max(len(p) + len(a) for p, a in rows)
        ids = torch.full((len(rows), width), self.generator.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for r, (p, a) in enumerate(rows):  # right padded: prompt, answer, EOS
            ids[r, : len(p) + len(a)] = torch.tensor(p + a)
            mask[r, : len(p) + len(a)] = 1
            labels[r, len(p) : len(p) + len(a)] = torch.tensor(a)
        return ids, mask, labels
