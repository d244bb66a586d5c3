"""Calling a reward: the two forms it may take, the score it may return, what happens when it raises or hangs.

- `fn(completion, reference)`: the reference answer as text (every built-in reward but `code_tests`).
- `fn(completion, problem)` (the second parameter named `problem`): the whole `Problem`, with `problem.fields`.
- A batch reward (registered with `batch=True`, e.g. `code_tests`) takes the lists and returns a list.

A reward returns a number, or a mapping of named components (format, correctness, ...) whose sum is the reward;
their means are logged beside it. A completion is *correct* (pass@k, F-GRPO's success rate, greedy accuracy) when
its reward reaches `eval.correct_threshold`; GRPO's advantages and ESSA's fitness use the reward itself
(docs/rewards.md). A reward that raises fails the run naming the reward, the problem and the completion's start, or
scores 0 and is counted (`eval.reward_errors: zero`); a call that runs over `eval.reward_timeout_s` counts as one
that raised (its thread is abandoned: Python cannot stop it).
"""

from __future__ import annotations

import inspect
import math
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from essaflow.data.schema import Problem
from essaflow.judging.reward_ref import RewardRef, RewardRefError, load_reward_function, resolve_reward_ref
from essaflow.judging.rewards import AUTO_REWARD, resolve_reward

if TYPE_CHECKING:
    from essaflow.judging.config import EvalConfig
    from essaflow.sandbox.config import SandboxConfig

ErrorPolicy = Literal["fail", "zero"]


class RewardError(RuntimeError):
    """A reward raised, hung or returned something that is not a score."""


@dataclass
class Scores:
    """The rewards of a batch of completions, in order."""

    rewards: list[float]
    components: dict[str, list[float]] = field(default_factory=dict)
    """Per named component (when the reward returns them), aligned with `rewards`."""
    errors: int = 0
    """Calls that raised or timed out and scored 0 (eval.reward_errors: zero)."""
    threshold: float = 1.0

    @property
    def correct(self) -> list[bool]:
        """Which completions count as correct: reward >= threshold."""
        return [r >= self.threshold for r in self.rewards]

    def mean(self) -> float:
        return sum(self.rewards) / max(len(self.rewards), 1)

    def component_means(self) -> dict[str, float]:
        return {k: sum(v) / max(len(v), 1) for k, v in self.components.items()}


def takes_problem(fn: Callable[..., Any]) -> bool:
    """True when `fn`'s second parameter is named `problem` (it receives the Problem, not the reference text)."""
    params = list(inspect.signature(fn).parameters.values())
    return len(params) >= 2 and params[1].name == "problem"


def check_signature(fn: Callable[..., Any], label: str) -> None:
    """RewardRefError unless `fn` can be called with two positional arguments."""
    try:
        inspect.signature(fn).bind("completion", "problem")
    except TypeError as e:
        raise RewardRefError(f"eval.reward {label!r}: {fn.__name__} must take (completion, problem) or "
                             f"(completion, reference): {e}") from None  # fmt: skip
    except ValueError:  # a builtin without a signature: trust it
        pass


class Judge:
    """Scores completions with one reward, under the run's threshold, error policy and per-call timeout."""

    def __init__(self, ref: RewardRef | str, threshold: float = 1.0, errors: ErrorPolicy = "fail",
                 timeout_s: float | None = 30.0, sandbox: SandboxConfig | None = None):  # fmt: skip
        self.ref = resolve_reward_ref(ref) if isinstance(ref, str) else ref
        self.sandbox = sandbox
        """Where a batch reward that runs code (code_tests) runs it: eval.sandbox."""
        self.fn = load_reward_function(self.ref)
        check_signature(self.fn, self.ref.ref)
        self.batch = self._is_batch()
        self.with_problem = takes_problem(self.fn)
        self.threshold, self.errors, self.timeout_s = threshold, errors, timeout_s

    def _is_batch(self) -> bool:
        if self.ref.kind != "builtin":
            return False
        from essaflow.judging.rewards import REWARDS

        return bool(REWARDS.meta(self.ref.function).get("batch"))

    def score(self, completions: Sequence[str], problems: Sequence[Problem]) -> Scores:
        """The reward of completion i against problem i."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
        if self.batch:
            try:
                raw: list[Any] = list(self.fn(list(completions), list(problems), self.sandbox))
            except ValueError as e:  # a problem the reward cannot judge (no tests field): name the reward
                raise RewardError(f"reward {self.ref.ref!r}: {e}") from e
            return self._collect(raw, [None] * len(raw), problems, completions)
        args = [(c, p if self.with_problem else p.answer) for c, p in zip(completions, problems)]
        if self.ref.kind == "builtin" or not self.timeout_s:  # ours: trusted and bounded
            results = [_call(self.fn, a) for a in args]
        else:
            results = _call_all_with_timeout(self.fn, args, self.timeout_s)
        return self._collect([r for r, _ in results], [e for _, e in results], problems, completions)

    def __call__(self, completion: str, problem: Problem) -> float:
        """One completion's reward."""
        return self.score([completion], [problem]).rewards[0]

    def _collect(self, raw, errs, problems, completions) -> Scores:
        out = Scores([], {}, 0, self.threshold)
        for i, (value, err) in enumerate(zip(raw, errs)):
            if err is None:
                try:
                    value, parts = _as_score(value)
                except TypeError as e:
                    err = e
            if err is not None:
                if self.errors == "fail":
                    raise RewardError(self._describe(err, problems[i], completions[i])) from err
                value, parts, out.errors = 0.0, {}, out.errors + 1
            out.rewards.append(value)
            for name, v in parts.items():
                out.components.setdefault(name, [0.0] * i).append(v)
            for col in out.components.values():  # a component this call did not return counts 0
                col.extend([0.0] * (i + 1 - len(col)))
        return out

    def _describe(self, err: BaseException, problem: Problem, completion: str) -> str:
        start = completion[:80] + ("..." if len(completion) > 80 else "")
        return (f"reward {self.ref.ref!r} failed on problem {problem.id!r} ({type(err).__name__}: {err}); completion "
                f"starts {start!r} (eval.reward_errors: zero scores such calls 0 and counts them)")  # fmt: skip


def _as_score(value: Any) -> tuple[float, dict[str, float]]:
    """(reward, components) of what a reward returned; TypeError for anything else, or a NaN."""
    if isinstance(value, Mapping):
        parts = {str(k): _number(v) for k, v in value.items()}
        return sum(parts.values()), parts
    return _number(value), {}


def _number(v: Any) -> float:
    if isinstance(v, bool | int | float) and not (isinstance(v, float) and math.isnan(v)):
        return float(v)
    try:
        import numpy as np

        if isinstance(v, np.number) and not np.isnan(v):
            return float(v)
    except ImportError:  # pragma: no cover - numpy ships with every install
        pass
    raise TypeError(f"returned {v!r}: a reward returns a number or a mapping of named numbers")


def _call(fn: Callable[..., Any], args: tuple[Any, Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - the policy decides (fail naming the problem, or zero)
        return None, e


def _calls_in_thread(fn, args: list[tuple[Any, Any]]) -> queue.Queue:
    """Start a daemon thread calling `fn` on each pair in turn; its results arrive on the returned queue."""
    done: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [done.put(_call(fn, a)) for a in args], daemon=True).start()
    return done


def _call_all_with_timeout(fn, args: list[tuple[Any, Any]], timeout_s: float) -> list[tuple[Any, BaseException | None]]:
    """Call `fn` on each argument pair in order, in a daemon thread watched call by call: a call over `timeout_s`
    is an error, its thread abandoned and a fresh one goes on with the next."""
    results: list[tuple[Any, BaseException | None]] = []
    while len(results) < len(args):
        done = _calls_in_thread(fn, args[len(results) :])
        while len(results) < len(args):
            try:
                results.append(done.get(timeout=timeout_s))
            except queue.Empty:
                results.append((None, TimeoutError(f"no result within eval.reward_timeout_s={timeout_s:g} s")))
                break  # the hung thread keeps the queue it was given; the next one starts after this call
    return results


@dataclass(frozen=True)
class JudgeSpec:
    """A judge as it travels to a Ray worker: the reward's source by value and the eval section's settings."""

    ref: RewardRef
    threshold: float = 1.0
    errors: ErrorPolicy = "fail"
    timeout_s: float | None = 30.0
    sandbox: SandboxConfig | None = None

    def build(self) -> Judge:
        return Judge(self.ref, self.threshold, self.errors, self.timeout_s, self.sandbox)


def judge_spec(eval_cfg: EvalConfig) -> JudgeSpec:
    """The judge of a run's eval section, its reward read from eval.reward. The source must match
    eval.reward_digest, the one the run was configured with (a file edited mid-run is an error, not a silent
    change of reward)."""
    name = eval_cfg.reward
    if name == AUTO_REWARD:  # an EvalConfig used without a pipeline config: the default task's reward
        name = resolve_reward(name, "synthetic", "plain")
    ref = resolve_reward_ref(name)
    if eval_cfg.reward_digest and ref.digest != eval_cfg.reward_digest:
        raise RewardError(
            f"reward {name!r}: {ref.origin} changed since the run's config was read (digest {ref.digest[:12]}, "
            f"configured {eval_cfg.reward_digest[:12]}); start the run again"
        )
    return JudgeSpec(
        ref, eval_cfg.correct_threshold, eval_cfg.reward_errors, eval_cfg.reward_timeout_s, eval_cfg.sandbox
    )


def judge_for(eval_cfg: EvalConfig) -> Judge:
    """`judge_spec(eval_cfg).build()`."""
    return judge_spec(eval_cfg).build()


def as_judge(reward: Judge | str) -> Judge:
    """A Judge as given, or one for a registered reward's name (binary rewards, threshold 1)."""
    return reward if isinstance(reward, Judge) else Judge(reward)
