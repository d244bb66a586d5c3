"""Calling a reward: the two forms it may take, the score it may return, what happens when it raises or hangs.

- `fn(completion, reference)`: the reference answer as text (every built-in reward but `code_tests`).
- `fn(completion, problem)` (the second parameter named `problem`): the whole `Problem`, with `problem.fields`.
- A batch reward (registered with `batch=True`, e.g. `code_tests`) takes the lists and returns a list.

A reward returns a finite number, or a mapping of named finite numbers (format, correctness, ...) whose sum is the
reward; their means are logged beside it. A completion is *correct* (pass@k, F-GRPO's success rate, greedy
accuracy) when its reward reaches `eval.correct_threshold`; GRPO's advantages and ESSA's fitness use the reward
itself (docs/rewards.md).

The built-in rewards run here (ours, bounded). A reward of your own runs in a small pool of processes of its own
(reward_pool.py): its import and each call have a deadline (`eval.reward_timeout_s`), and a crash, `sys.exit`,
`os._exit`, a hang, an output flood or a `KeyboardInterrupt` costs that call alone. A call that fails fails the
batch at once naming the reward, the problem and the completion's start, or scores 0 and is counted
(`eval.reward_errors: zero`); under zero, BREAKER calls in a row that time out or end the reward's process stop
the batch all the same (a reward that cannot answer is not waited out completion after completion).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from essaflow.data.schema import Problem
from essaflow.judging.reward_pool import Breaker, Failure, reward_pool
from essaflow.judging.reward_ref import RewardRef, RewardRefError, load_reward_function, resolve_reward_ref
from essaflow.judging.reward_worker import as_score, message, signature_error
from essaflow.judging.reward_worker import takes_problem as takes_problem
from essaflow.judging.rewards import AUTO_REWARD, resolve_reward

if TYPE_CHECKING:
    from essaflow.judging.config import EvalConfig
    from essaflow.sandbox.config import SandboxConfig

ErrorPolicy = Literal["fail", "zero"]
#: eval.reward_errors: zero stops a batch after this many calls in a row that timed out or ended the reward's process
BREAKER = 3


class RewardError(RuntimeError):
    """A reward raised, hung, exited or returned something that is not a score.

    kind: raised (an exception), value (not a finite number), exit (sys.exit, KeyboardInterrupt), output (printed
    past the cap), timeout, ended (the reward's process ended: os._exit, a crash), broken (the breaker: calls in a
    row that timed out or ended the process), import (the reward could not be loaded again)."""

    def __init__(self, text: str, kind: str = "raised", detail: str = ""):
        super().__init__(text)
        self.kind = kind
        self.detail = detail or text
        """What the call did, without the reward's name and the problem (`Type: message`)."""

    def __reduce__(self) -> tuple[Any, ...]:  # the kind survives pickling (Ray, Prefect's results)
        return type(self), (str(self), self.kind, self.detail)


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


def check_signature(fn: Callable[..., Any], label: str) -> None:
    """RewardRefError unless `fn` can be called with two positional arguments."""
    wrong = signature_error(fn)
    if wrong:
        raise RewardRefError(f"eval.reward {label!r}: {wrong}")


class Judge:
    """Scores completions with one reward, under the run's threshold, error policy and per-call timeout."""

    def __init__(self, ref: RewardRef | str, threshold: float = 1.0, errors: ErrorPolicy = "fail",
                 timeout_s: float | None = 30.0, sandbox: SandboxConfig | None = None):  # fmt: skip
        self.ref = resolve_reward_ref(ref) if isinstance(ref, str) else ref
        self.sandbox = sandbox
        """Where a batch reward that runs code (code_tests) runs it: eval.sandbox."""
        self.threshold, self.errors, self.timeout_s = threshold, errors, timeout_s
        self._breaker = Breaker(BREAKER if errors == "zero" else 0)
        if self.ref.kind == "builtin":  # ours: trusted and bounded, called here
            self.fn: Callable[..., Any] | None = load_reward_function(self.ref)
            check_signature(self.fn, self.ref.ref)
            self.batch = self._is_batch()
            self.with_problem = takes_problem(self.fn)
            self._pool = None
        else:  # yours: loaded in its own processes, within the import deadline (RewardRefError when it cannot be)
            self.fn = None
            self._pool = reward_pool(self.ref, timeout_s or None)
            self.batch = False
            self.with_problem = self._pool.with_problem

    @property
    def isolated(self) -> bool:
        """Whether the reward runs in processes of its own (a reward of yours) rather than in this one."""
        return self._pool is not None

    def _is_batch(self) -> bool:
        from essaflow.judging.rewards import REWARDS

        return bool(REWARDS.meta(self.ref.function).get("batch"))

    def score(self, completions: Sequence[str], problems: Sequence[Problem]) -> Scores:
        """The reward of completion i against problem i."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
        if self._pool is not None:
            return self._score_isolated(completions, problems)
        if self.batch:
            try:
                raw: list[Any] = list(self.fn(list(completions), list(problems), self.sandbox))
            except ValueError as e:  # a problem the reward cannot judge (no tests field): name the reward
                raise RewardError(f"reward {self.ref.ref!r}: {e}") from e
            return self._collect([_scored(v) for v in raw], problems, completions)
        seconds = [(p if self.with_problem else p.answer) for p in problems]
        return self._collect([_call(self.fn, c, s) for c, s in zip(completions, seconds)], problems, completions)

    def _score_isolated(self, completions: Sequence[str], problems: Sequence[Problem]) -> Scores:
        refs: list[Any] = []
        index: dict[int, int] = {}
        calls = []
        for c, p in zip(completions, problems):  # each problem (or reference) is sent once per request
            j = index.get(id(p))
            if j is None:
                j = index[id(p)] = len(refs)
                refs.append(p.model_dump(mode="json", exclude={"metadata"}) if self.with_problem else p.answer)
            calls.append((c, j))
        out = self._pool.call(refs, calls, self.timeout_s or None, self.errors == "fail", self._breaker)
        if out.fatal is not None:
            raise RewardError(f"reward {self.ref.ref!r}: {out.fatal}", "import")
        tripped = self._breaker.tripped_at
        if tripped is not None:
            self._breaker.tripped_at = None
            self._breaker.in_a_row = 0
            failure = out.results[tripped]
            raise RewardError(
                f"reward {self.ref.ref!r}: {self._breaker.limit} calls in a row timed out or ended the reward's "
                f"process, the last on problem {problems[tripped].id!r} ({failure.error}: {failure.message}); "
                "eval.reward_errors: zero scores a failing call 0, but a reward that cannot answer is stopped "
                "rather than waited out on every completion: fix the reward"
                + (", or raise eval.reward_timeout_s if it is only slow" if failure.kind == "timeout" else ""),
                failure.kind if failure.kind in ("timeout", "ended") else "broken",
            )
        if out.stopped:  # the first failure stopped the batch (eval.reward_errors: fail): it is the one reported
            first = next(i for i, r in enumerate(out.results) if isinstance(r, Failure))
            return self._collect(out.results[: first + 1], problems, completions)
        return self._collect(out.results, problems, completions)

    def __call__(self, completion: str, problem: Problem) -> float:
        """One completion's reward."""
        return self.score([completion], [problem]).rewards[0]

    def _collect(self, results: list[Any], problems, completions) -> Scores:
        out = Scores([], {}, 0, self.threshold)
        for i, result in enumerate(results):
            if isinstance(result, Failure) or result is None:
                failure = result or Failure("raised", "RuntimeError", "no result")
                if self.errors == "fail":
                    raise RewardError(self._describe(failure, problems[i], completions[i]), failure.kind,
                                      f"{failure.error}: {failure.message}")  # fmt: skip
                value, parts, out.errors = 0.0, {}, out.errors + 1
            elif isinstance(result, tuple):
                value, parts = result
            else:
                value, parts = result, {}
            out.rewards.append(value)
            for name, v in parts.items():
                col = out.components.get(name)
                if col is None:  # not setdefault: its default would build i zeros on every call
                    col = out.components[name] = [0.0] * i
                col.append(v)
            for col in out.components.values():  # a component this call did not return counts 0
                col.extend([0.0] * (i + 1 - len(col)))
        return out

    def _describe(self, failure: Failure, problem: Problem, completion: str) -> str:
        start = completion[:80] + ("..." if len(completion) > 80 else "")
        return (
            f"reward {self.ref.ref!r} failed on problem {problem.id!r} ({failure.error}: {failure.message}); "
            f"completion starts {start!r} (eval.reward_errors: zero scores such calls 0 and counts them)"
        )


def _scored(value: Any) -> Any:
    """What a built-in reward returned as a number, (number, components) or a Failure."""
    try:
        reward, parts = as_score(value)
    except (TypeError, ValueError) as e:
        return Failure("value", type(e).__name__, str(e))
    return reward if parts is None else (reward, parts)


def _call(fn: Callable[..., Any], completion: str, second: Any) -> Any:
    try:
        value = fn(completion, second)
    except Exception as e:  # noqa: BLE001 - the policy decides (fail naming the problem, or zero)
        return Failure("raised", type(e).__name__, message(e))
    return _scored(value)


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
