"""What every config shares: strict pydantic models, one error type, trajectory marks and removed keys.

Each stage's config lives beside the code it configures (`essa/config.py`, `grpo/config.py`, `data/config.py`,
`model/config.py`, ...); `config.py` composes them into the pipeline config. This module holds only the pieces they
all use, so no config module imports another stage's code.

- **Trajectory marks.** A field declared with :func:`trajectory` changes what a training run computes, so a
  checkpoint written under one value must not be resumed under another. :func:`trajectory_values` collects the
  marked fields of a config tree as dotted keys; checkpoints store them and the resume check compares them.
- **Removed keys.** :func:`gone_keys` names the keys a section no longer takes (`essa.worker_cpus`,
  `essa.backend`), each with the key that replaces it, so a config still writing one is refused with a message
  saying what to write.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("essaflow.config")

_TRAJECTORY = "trajectory"


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the offending field."""


def _key_title(name: str, _info: Any) -> str:
    return name


class StrictConfig(BaseModel):
    """Unknown keys are rejected, assignments validated, field docstrings kept as descriptions (UI form).

    Every field's title is its own key (`data`, `population`): the Prefect form then names a section and a field
    as presets and `--set essa.population=...` spell them, not by class name (`DataConfig`) or "Population".
    """

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True, field_title_generator=_key_title
    )


def trajectory(default: Any, **kwargs: Any) -> Any:
    """A pydantic Field whose value a checkpoint's trajectory depends on (see :func:`trajectory_values`)."""
    return Field(default, json_schema_extra={_TRAJECTORY: True}, **kwargs)


def is_trajectory_field(model: type[BaseModel], name: str) -> bool:
    extra = model.model_fields[name].json_schema_extra
    return isinstance(extra, dict) and bool(extra.get(_TRAJECTORY))


def trajectory_values(config: BaseModel, prefix: str = "") -> dict[str, Any]:
    """Every trajectory-marked field of `config` and its sub-configs, as {dotted key: JSON value}."""
    out: dict[str, Any] = {}
    for name in type(config).model_fields:
        value = getattr(config, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            out.update(trajectory_values(value, key + "."))
        elif is_trajectory_field(type(config), name):
            out[key] = config.model_dump(mode="json", include={name})[name]
    return out


def changed_trajectory(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose value differs between a checkpoint's trajectory and the current config's."""
    return sorted(k for k in current if k in saved and saved[k] != current[k])


def gone_keys(tree: Any, replaced: dict[str, str]) -> str | None:
    """Which keys of a raw config mapping a section no longer takes, each as "<key> is gone: write <what replaces
    it>", joined; None when it gives none. A key that is now a sub-section of the same name (`workers`) counts only
    when given a plain value (`essa.workers=3`, the old spelling of workers.count)."""
    if not isinstance(tree, dict):
        return None
    found = [f"{old} is gone: write {new}" for old, new in replaced.items()
             if old in tree and not isinstance(tree[old], dict | BaseModel)]  # fmt: skip
    return "; ".join(found) or None


def ray_quantity(value: float | None) -> float | None:
    """Ray takes fractions of a resource only below 1: 0.5 or 2 CPUs, not 1.5."""
    if value is not None and value > 1 and not float(value).is_integer():
        raise ValueError(f"{value}: Ray accepts fractions only below 1 (whole numbers above)")
    return value
