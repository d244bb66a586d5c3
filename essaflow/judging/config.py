"""The `eval` section: the pass@k protocol (evaluation.py) and the reward it judges with.

No torch or transformers here, so reading a config stays cheap for the processes that never load a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from essaflow.config_base import StrictConfig, trajectory
from essaflow.data.config import HeldOutSourceConfig
from essaflow.judging.reward_ref import absolute_ref, resolve_reward_ref, split_ref
from essaflow.judging.rewards import AUTO_REWARD, REWARDS
from essaflow.sandbox.config import SandboxConfig


class EvalConfig(StrictConfig):
    """pass@k evaluation protocol (Codex unbiased estimator, docs/algorithms.md sec. 4.1)."""

    samples_per_problem: int = Field(16, ge=1)
    """n: completions sampled per problem at sampling.temperature."""
    ks: list[int] = [1, 2, 4, 8, 16]
    """k values reported; each must be <= samples_per_problem."""
    max_problems: int | None = Field(None, ge=1)
    """Evaluate on at most this many eval problems (None = all)."""
    seed: int = 1234
    """Sampling seed: the same seed before and after training gives a paired comparison."""
    shared_prompt: bool = True
    """Compute each problem's prompt once for its n samples. Transformers engine: a batch prefills each prompt once
    and decodes its samples side by side from copies of its KV cache, drawing them by Gumbel-max keyed by (seed,
    problem, sample): the distribution of per-sample `generate`, on another random stream (docs/algorithms.md
    sec. 8.2). vLLM engine: the requests read its prefix cache. Off: every sample prefills its own copy of the
    prompt (transformers: `generate`, torch's RNG seeded by `seed`)."""
    reward: str = trajectory("auto")
    """Reward used to judge completions: a registered name (exact_match, math_verify, final_number, code_tests), a
    file of yours (`path/to/file.py:function`, relative to the config file, or absolute) or a module
    (`package.module:function`); docs/rewards.md. auto follows the data: math_verify for data.adapter gsm8k or
    math (symbolic equivalence of the extracted final answer), exact_match for plain files, and for the synthetic
    source its task's (exact_match, countdown, code_tests); the pipeline config resolves it, so runs record the
    concrete name."""
    reward_digest: str | None = None
    """SHA-256 of the reward's source (the file that defines it), computed when the config is read (a value given
    is replaced): part of the protocol, so a changed reward re-scores the champion and misses every cache."""
    correct_threshold: float = Field(1.0, allow_inf_nan=False)
    """A completion counts as correct (pass@k, greedy accuracy, F-GRPO's success rate) when its reward reaches
    this; GRPO's advantages and ESSA's fitness use the reward itself (docs/rewards.md). A finite number: nan or inf
    is refused. 0 or below is accepted, for a reward whose right answers score 0 or less (a penalty-only reward),
    with a note from check-config and run: with a reward that is never negative, every completion is correct."""
    reward_errors: Literal["fail", "zero"] = "fail"
    """A reward call that raises or times out: fail the run naming the reward, problem and completion, or score 0
    and count it (`reward_errors` in the results). Under zero, 3 calls in a row that time out or end the reward's
    process fail the run all the same: a reward that cannot answer is not waited out on every completion."""
    reward_timeout_s: float = Field(30.0, gt=0, le=3600, allow_inf_nan=False)
    """Longest one call of a reward of yours may take, and its import (its file's top-level code, once in each of
    the reward's processes); at most an hour. A call past it fails alone: its process is killed and replaced (the
    built-in rewards run in this process and bound themselves); docs/rewards.md."""
    sandbox: SandboxConfig = SandboxConfig()
    """Where model-written code runs (the code_tests reward): bubblewrap, or `none` for trusted setups only
    (shown with every result it produced); docs/rewards.md."""
    data: HeldOutSourceConfig | None = None
    """A held-out set of its own (GSM8K's test file, MATH500, a path, glob or s3:// prefix) instead of a region of
    the training data; problems it shares with the training data are dropped from training and counted
    (`eval_overlap_dropped`), and data.eval_size caps how many are evaluated (docs/data.md)."""
    samples_saved_per_problem: int = Field(4, ge=0)
    """Completions kept per problem in the report's samples.jsonl.gz (with their correctness and truncation), so
    you can read what the model wrote; 0 keeps only the counts."""

    @property
    def runs_code(self) -> bool:
        """Whether the reward runs model-written code (in eval.sandbox)."""
        return self.reward == "code_tests"

    def judged_with(self) -> dict[str, str]:
        """How a result of this protocol was judged, as every result states it (run and version tags, the JSON
        line, each evaluation report): the reward (a registered name, or a file's function), its source digest,
        the correctness threshold and, for a reward that runs model-written code, the sandbox it ran in."""
        kind, _, function = split_ref(self.reward)
        out = {"reward": self.reward if kind == "builtin" else function, "reward_digest": self.reward_digest or ""}
        out["correct_threshold"] = f"{self.correct_threshold:g}"
        if self.runs_code:
            out["sandbox"] = self.sandbox.judged_as()  # its kind, and the packages it shows when there are any
        return out

    @model_validator(mode="after")
    def _k_within_n(self) -> EvalConfig:
        if not self.ks:  # nothing to report, and no pass@k for gate.metric or the guards
            raise ValueError("ks is empty: list the k of pass@k to report, e.g. [1] or [1, 4, 16]")
        bad = [k for k in self.ks if k > self.samples_per_problem or k < 1]
        if bad:
            raise ValueError(f"ks {bad} must be between 1 and samples_per_problem={self.samples_per_problem}")
        return self

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str) -> str:
        kind, _, _ = split_ref(v)
        return REWARDS.check(v) if kind == "builtin" and v != AUTO_REWARD else v

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_by_kind(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _digest_the_reward(self) -> EvalConfig:
        # __dict__: a plain assignment would re-run the validators (validate_assignment)
        if self.reward != AUTO_REWARD:  # a relative file given on the command line: from the current folder
            self.__dict__["reward"] = absolute_ref(self.reward, Path.cwd())
        self.__dict__["reward_digest"] = None if self.reward == AUTO_REWARD else resolve_reward_ref(self.reward).digest
        return self
