"""The pipeline config: one run's stages, each configured by the config that lives beside its code.

Where each section is defined (and documented, field by field):

    data      essaflow/data/config.py            DataConfig, SyntheticTaskConfig
    model     essaflow/model/config.py           ModelConfig
    sampling  essaflow/generation/config.py      SamplingConfig, VLLMConfig
    eval      essaflow/judging/config.py         EvalConfig
    gate      essaflow/gate/config.py            GateConfig (the promotion gate)
    sft       essaflow/training/config.py        SFTConfig
    essa      essaflow/essa/config.py            ESSAConfig (workers: essaflow/cluster/config.py)
    grpo      essaflow/grpo/config.py            GRPOConfig (workers: essaflow/cluster/config.py)

Every field carries a docstring (pydantic keeps it as the field description, so the Prefect UI form shows it).
Unknown keys are rejected, and cross-field rules run at load time, so a bad value fails before any compute starts
with a message naming the field. Presets are YAML files in configs/; a `--set a.b=c` value is a list or mapping
when it opens with `[` or `{` (unless the field takes only text), a number, boolean or null when YAML would type it
so, else the text as written.

A preset may start from another: `extends: tiny.yaml` (a path relative to the preset's own folder) reads that file
first, then merges the preset on top of it key by key (see :func:`merge_tree`: the preset wins; a list or a number
replaces the base's). The base may extend a third file; a file reached twice on one chain is a ConfigError naming
the chain.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from essaflow.cluster.address import ray_address_problem
from essaflow.cluster.config import ESSAWorkersConfig, GRPOWorkersConfig, RayWorkersConfig
from essaflow.cluster.request import TrainingRequest
from essaflow.config_base import ConfigError, StrictConfig, changed_trajectory, trajectory_values
from essaflow.config_rules import (
    DuplicateKeyError,
    load_yaml,
    registered_name_problem,
    storage_uri_problem,
    tracking_uri_problem,
)
from essaflow.data.config import EVALUATION_SOURCES, DataConfig, SyntheticTaskConfig
from essaflow.essa.config import ESSAConfig
from essaflow.gate.config import GateConfig, moved_keys
from essaflow.generation.config import SamplingConfig
from essaflow.grpo.config import GRPOConfig
from essaflow.judging.config import EvalConfig
from essaflow.judging.reward_ref import absolute_ref, resolve_reward_ref
from essaflow.judging.rewards import resolve_reward
from essaflow.model.config import ModelConfig
from essaflow.model.tiny_recipe import BUILTIN_MODELS
from essaflow.secrets import NO_PASSWORD_IN_FORM
from essaflow.training.config import SFTConfig

__all__ = [
    "ConfigError", "DataConfig", "ESSAConfig", "ESSAWorkersConfig", "EvalConfig", "GRPOConfig", "GRPOWorkersConfig",
    "GateConfig", "ModelConfig", "PipelineConfig", "RayWorkersConfig", "SFTConfig", "SamplingConfig",
    "SyntheticTaskConfig", "apply_overrides", "apply_values", "changed_trajectory", "load_config", "merge_tree",
    "override_value", "parse_config", "read_yaml_tree", "resolve_extends", "reward_file_from", "section_trajectory",
]  # fmt: skip


class PipelineConfig(StrictConfig):
    """One fine-tuning pipeline run: data -> baseline eval -> SFT -> train -> eval -> register."""

    name: str = "tiny-arith"
    """Pipeline name; also the registered model name prefix."""
    method: Literal["essa", "fgrpo", "none"] = "essa"
    """Training method after the SFT warm start."""
    seed: int = 0
    """Global seed."""
    data: DataConfig = DataConfig()
    """Dataset preparation."""
    model: ModelConfig = ModelConfig()
    """Base model and LoRA."""
    sampling: SamplingConfig = SamplingConfig()
    """Generation settings for evaluation."""
    eval: EvalConfig = EvalConfig()
    """pass@k protocol."""
    sft: SFTConfig = SFTConfig()
    """LoRA SFT warm start."""
    essa: ESSAConfig = ESSAConfig()
    """ESSA settings (method=essa)."""
    grpo: GRPOConfig = GRPOConfig()
    """F-GRPO settings (method=fgrpo)."""
    storage_uri: str = "file://.essaflow/store"
    """Artifact root: file:// directory or s3://bucket/prefix."""
    tracking_uri: str | None = Field(None, json_schema_extra=NO_PASSWORD_IN_FORM)
    """MLflow tracking URI; None uses MLFLOW_TRACKING_URI or a local sqlite file. A deployment's form refuses one
    with a password (the worker's MLFLOW_TRACKING_URI holds it); the CLI moves one into the environment."""
    ray_address: str | None = Field(None, json_schema_extra=NO_PASSWORD_IN_FORM)
    """Ray cluster for training workers: the head's GCS host:port, or "local" for a new local Ray; None uses
    RAY_ADDRESS, else a local Ray. Token auth comes from RAY_AUTH_MODE / RAY_AUTH_TOKEN(_PATH), never from here."""
    adapter_uri: str | None = None
    """Start from this SFT adapter instead of training one."""
    gate: GateConfig = GateConfig()
    """The promotion gate: the metric it promotes on, minimum gain, confidence, guard metrics (docs/compare.md,
    "The promotion gate")."""

    def trained_section(self) -> ESSAConfig | GRPOConfig | None:
        """The section of the method that trains (the one whose config names `method` as its own, `METHOD`); None
        for method none. The method objects (essaflow/methods/) own the rest of what a method is; this config
        cannot ask them, as they import the trainers, which read this config."""
        sections = (getattr(self, name) for name in type(self).model_fields)
        return {s.METHOD: s for s in sections if hasattr(s, "METHOD")}.get(self.method)

    def cluster_request(self) -> TrainingRequest | None:
        """The Ray workers this run's training asks for: its method's section states them (None: method none, or
        training in process). `essaflow.checks.cluster.check_training_fits` checks it against a cluster."""
        section = self.trained_section()
        return None if section is None else section.cluster_request()

    @field_validator("name")
    @classmethod
    def _registrable_name(cls, v: str) -> str:
        return _refuse(registered_name_problem(v), v)

    @field_validator("storage_uri")
    @classmethod
    def _openable_storage(cls, v: str) -> str:
        return _refuse(storage_uri_problem(v), v)

    @field_validator("tracking_uri")
    @classmethod
    def _trackable_uri(cls, v: str | None) -> str | None:
        return v if v is None else _refuse(tracking_uri_problem(v), v)

    @field_validator("ray_address")
    @classmethod
    def _ray_address_spelling(cls, v: str | None) -> str | None:
        return v if v is None else _refuse(ray_address_problem(v), v)

    @model_validator(mode="after")
    def _defaults_that_follow_the_data_and_model(self) -> PipelineConfig:
        # __dict__: a plain assignment would re-run this validator (validate_assignment)
        reward = resolve_reward(self.eval.reward, self.data.source, self.data.adapter, self.data.synthetic.task)
        if reward != self.eval.reward:  # eval.reward=auto: the reward that matches the data's answers
            digest = resolve_reward_ref(reward).digest
            self.__dict__["eval"] = self.eval.model_copy(update={"reward": reward, "reward_digest": digest})
        builtin = BUILTIN_MODELS.get(self.model.name_or_path)
        if builtin is not None and "max_new_tokens" not in self.sampling.model_fields_set:
            # the 512-token default is sized for real models; a tiny model's answers run a few characters
            self.__dict__["sampling"] = self.sampling.model_copy(update={"max_new_tokens": builtin.max_new_tokens})
        return self

    @model_validator(mode="after")
    def _method_rules(self) -> PipelineConfig:
        """What the training method's section asks of the rest of the pipeline (ESSA: an adapter to search)."""
        section = self.trained_section()
        problem = None if section is None else section.pipeline_problem(self.sft.trains, self.adapter_uri)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _trains_on_a_training_source(self) -> PipelineConfig:
        training = self.method if self.trained_section() else "SFT" if self.sft.trains else None
        if training and self.data.source in EVALUATION_SOURCES:
            raise ValueError(
                f"data.source={self.data.source} is an evaluation set (every problem held out), nothing to train "
                f"{training} on: evaluate with `essaflow eval --base -c ...` or `essaflow eval models:/NAME@ALIAS "
                "-c ...` (method: none, sft.enabled: false), and train on another source"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _gate_keys_moved(cls, data: Any) -> Any:
        return _refuse(moved_keys(data), data)

    @model_validator(mode="after")
    def _gate_metrics_measured(self) -> PipelineConfig:
        return _refuse(self.gate.unmeasured(self.eval.ks), self)


def _refuse(problem: str | None, value: Any) -> Any:
    """A field validator's verdict from a rule (essaflow/config_rules.py): the value, or the problem."""
    if problem:
        raise ValueError(problem)
    return value


#: the sections every trainer's trajectory depends on besides its own: data (the chat template and system prompt),
#: and the model, sampling and eval settings its scorer or rollouts read
TRAJECTORY_READS = ("data", "model", "sampling", "eval")


def section_trajectory(cfg: PipelineConfig, section: str) -> dict[str, Any]:
    """The trajectory-marked fields that training with the `section` section (essa, grpo) depends on, as {dotted
    key: value}: its own and those of TRAJECTORY_READS; what a checkpoint records and a resume must find unchanged
    (marks on the fields, `config_base`). A method's object gives its own: `method_of(cfg).trajectory(cfg)`."""
    out: dict[str, Any] = {}
    for name in (*TRAJECTORY_READS, section):
        out.update(trajectory_values(getattr(cfg, name), f"{name}."))
    return out


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if _empty_key(dotted):
        raise ConfigError(f"override {dotted!r}: {_empty_key(dotted)}")
    node = tree
    for key in keys[:-1]:
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: '{key}' is not a section")
        node = nxt
    node[keys[-1]] = value


def _empty_key(dotted: str) -> str | None:
    """What is wrong with a dotted key that names no field (`=5`, `essa..population=5`), else None."""
    if all(k.strip() for k in dotted.split(".")):
        return None
    what = "no key before '='" if not dotted.strip() else f"an empty part in the key {dotted.strip()!r}"
    return f"{what}; write section.key=value (e.g. essa.population=48)"


def apply_values(tree: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Apply {"section.key": value} (values as given, not parsed) to a plain config dict."""
    tree = copy.deepcopy(tree)
    for key, value in values.items():
        _set_dotted(tree, key.strip(), value)
    return tree


def apply_overrides(tree: dict[str, Any], overrides: list[str], model: type[BaseModel] | None = None) -> dict[str, Any]:
    """Apply `key.sub=value` overrides to a plain config dict (each value read by :func:`override_value`; with the
    config `model`, a field that takes only text gets the text as written, even one opening with `[` or `{`)."""
    tree = copy.deepcopy(tree)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        if _empty_key(key):
            raise ConfigError(f"--set {item!r}: {_empty_key(key)}")
        text = model is not None and _takes_text(model, key.strip().split("."))
        _set_dotted(tree, key.strip(), override_value(raw, item, len(key) + 1, text))
    return tree


def _takes_text(model: type[BaseModel], keys: list[str]) -> bool:
    """Whether the field at dotted `keys` of `model` takes a string and nothing else but None (a template)."""
    annotation: Any = model
    for key in keys:
        sub = _config_model(annotation)
        if sub is None or key not in sub.model_fields:
            return False
        annotation = sub.model_fields[key].annotation
    options = [a for a in get_args(annotation) if a is not type(None)] if _is_union(annotation) else [annotation]
    return len(options) == 1 and (
        options[0] is str
        or (get_origin(options[0]) is Literal and all(isinstance(a, str) for a in get_args(options[0])))
    )


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType)


def _config_model(annotation: Any) -> type[BaseModel] | None:
    options = get_args(annotation) if _is_union(annotation) else (annotation,)
    return next((a for a in options if isinstance(a, type) and issubclass(a, BaseModel)), None)


#: what opens a YAML literal in a `--set` value: a list, a mapping, a quoted string
_LITERAL_OPENERS = ("[", "{", '"', "'")
_TYPED_SCALARS = {f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "bool", "null")}


def override_value(raw: str, word: str | None = None, offset: int = 0, text_field: bool = False) -> Any:
    """A `--set` value: a list, mapping or quoted string literal is read as YAML; a number, a boolean or null is
    typed; any other text is the string as written (so `Q: {prompt}` stays text, not a mapping). For a `text_field`
    only a quoted literal is read as YAML (`{prompt} Answer:` and `[INST] {prompt}` are templates, not literals).

    A literal YAML cannot read is a ConfigError naming the `--set` word and the column (`offset`: where the value
    starts in `word`)."""
    text = raw.strip()
    if text.startswith(_LITERAL_OPENERS[2:] if text_field else _LITERAL_OPENERS):
        try:
            return yaml.load(text, Loader=_SetValueLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as err:
            shift = offset + len(raw) - len(raw.lstrip())
            raise _syntax_error(f"--set {word or raw!r}", err, shift) from None
    if yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False)) in _TYPED_SCALARS:
        return yaml.safe_load(text)
    return raw


class _SetValueLoader(yaml.SafeLoader):
    """SafeLoader for a `--set` literal, where `{prompt:question}` (no space after the colon: YAML's key
    'prompt:question' with no value) is read as {prompt: question}, as it is meant on a command line; a quoted key,
    or one given a value, stays as YAML reads it."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        node.value = [_split_colon_pair(key, value) for key, value in node.value]
        return super().construct_mapping(node, deep)


def _split_colon_pair(key: yaml.Node, value: yaml.Node) -> tuple[yaml.Node, yaml.Node]:
    """(key, value) nodes of a flow mapping's entry, a plain `a:b` key with no value split at its first colon."""
    bare = isinstance(key, yaml.ScalarNode) and key.style is None and ":" in key.value
    if not (bare and isinstance(value, yaml.ScalarNode) and value.style is None and value.value == ""):
        return key, value
    name, _, rest = key.value.partition(":")
    str_tag = "tag:yaml.org,2002:str"
    try:  # the value as YAML reads it alone: 'quoted', 3, [a, b], http://host:80/x
        read = yaml.compose(rest.strip(), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        read = None
    if read is None:
        read = yaml.ScalarNode(str_tag if rest.strip() else "tag:yaml.org,2002:null", rest.strip())
    return yaml.ScalarNode(str_tag, name.strip(), key.start_mark, key.end_mark), read


def _syntax_error(where: str, err: yaml.YAMLError, column_offset: int = 0) -> ConfigError:
    """One line: where, line and column (1-based), and what YAML expected."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1 + column_offset}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = f"{problem} ({context})" if context else problem
    return ConfigError(f"{where}: {at}YAML syntax error: {' '.join(str(detail).split())}")


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        last = str(e["loc"][-1]) if e["loc"] else ""
        if ":" in last and e.get("input", "") is None:  # `{prompt:question}` in a file: the key 'prompt:question'
            name, _, rest = last.partition(":")
            msg += f" (YAML reads {{{last}}} as the key {last!r} with no value: write {{{name}: {rest}}})"
        lines.append(f"{loc}: {msg}" if loc else msg)  # a cross-field rule names its fields itself
    return "invalid config: " + "; ".join(lines)


def parse_config(tree: dict[str, Any], model: type[BaseModel] = PipelineConfig) -> Any:
    """Validate a plain dict into a config model, raising ConfigError that names each bad field."""
    try:
        return model.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> PipelineConfig:
    """Load a YAML preset (or the defaults when path is None) and apply dotted overrides."""
    tree = read_yaml_tree(path) if path is not None else {}
    return parse_config(apply_overrides(tree, overrides or [], PipelineConfig))


#: the key by which a YAML config names the file it starts from
EXTENDS = "extends"


def read_yaml_tree(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A YAML config file as a plain mapping, its `extends:` chain resolved; a missing or empty file, a YAML syntax
    error (with its line and column), a non-mapping or a cycle is a ConfigError naming the file."""
    return _read_tree(Path(path), what, ())


def resolve_extends(tree: dict[str, Any], origin: str | Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """`tree` (read from the file `origin`) merged onto the file its `extends:` key names, relative to origin's
    folder; `chain` holds the files already being read on the way here (a cycle is refused, naming them)."""
    if EXTENDS not in tree:
        return tree
    origin = Path(origin)
    chain = (*chain, origin.resolve())
    base_name = tree[EXTENDS]
    if not isinstance(base_name, str) or not base_name.strip():
        raise ConfigError(f"{origin}: {EXTENDS} must name one YAML file, got {base_name!r}")
    base_path = (origin.parent / base_name).resolve()
    if base_path in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(base_path) :], base_path))
        raise ConfigError(f"{origin}: {EXTENDS} cycle: {cycle}")
    base = _read_tree(base_path, f"{EXTENDS}: {base_name} of {origin}", chain)
    return merge_tree(base, {k: v for k, v in tree.items() if k != EXTENDS})


def _read_tree(path: Path, what: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"{what} not found: {path}")
    if not path.is_file():
        raise ConfigError(f"{what} {path} is not a file")
    try:
        tree = load_yaml(path.read_text())
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {path} is not UTF-8 text: {err.reason} at byte {err.start}") from None
    except DuplicateKeyError as err:
        at = f"line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}"
        raise ConfigError(
            f"{path}: {at}: {err.problem} (first on line {err.first_line}); YAML would keep only the last: remove one"
        ) from None
    except yaml.YAMLError as err:
        raise _syntax_error(str(path), err) from None
    if tree is None:  # no document at all: running on every default is rarely what a config file meant
        raise ConfigError(f"{what} {path} is empty: write the keys it sets (`{{}}` for every default)")
    if not isinstance(tree, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    reward_file_from(tree, path.parent)
    return resolve_extends(tree, path, chain)


def reward_file_from(tree: dict[str, Any], folder: Path) -> None:
    """A reward file named relative to a config file is relative to that file's folder (as `extends` is): `tree`'s
    eval.reward made absolute against `folder`, in place (a compare file's task is such a tree too)."""
    section = tree.get("eval")
    if isinstance(section, dict) and isinstance(section.get("reward"), str):
        with contextlib.suppress(ValueError):  # malformed: the config's own validation names it
            section["reward"] = absolute_ref(section["reward"], folder.resolve())


def merge_tree(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: mappings merge key by key, any other value replaces (a list is not appended)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_tree(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
