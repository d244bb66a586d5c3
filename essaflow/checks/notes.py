"""What a valid config does that its author may not have meant: said as `note:` lines, the config still runs.

A section of the method that does not train (`grpo:` keys under `method: essa`) is read, validated and then
ignored; F-GRPO's fsdp on one rank shards nothing; an `eval.correct_threshold` of 0 or below counts every
completion of a non-negative reward as correct. `essaflow check-config` and `essaflow run` print these on stderr.
A compare config's task holds both methods' sections on purpose: it is not checked here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from essaflow.methods import method_of, other_methods


def set_keys(section: BaseModel, prefix: str) -> list[str]:
    """The dotted keys a config file or `--set` gave in `section` (its defaults left out), nested sections too."""
    keys = []
    for name in sorted(section.model_fields_set):
        value = getattr(section, name)
        nested = set_keys(value, f"{prefix}{name}.") if isinstance(value, BaseModel) else []
        keys += nested or [f"{prefix}{name}"]
    return keys


#: the knobs of data.synthetic that only one built-in task reads (the others read task and num_problems)
_TASK_KNOBS = {"arithmetic": ("min_digits", "max_digits", "operators"), "countdown": ("countdown",),
               "programs": ("programs",)}  # fmt: skip


def task_knob_notes(data: Any) -> list[str]:
    """`note:` lines for a DataConfig whose data.synthetic sets knobs its task (or its source) does not read to
    other than their defaults: Countdown's under the arithmetic task, any under a source other than synthetic (a
    preset that extends tiny.yaml restates arithmetic's defaults: no note)."""
    synthetic = data.synthetic
    defaults = type(synthetic)()
    notes = []
    for task, knobs in _TASK_KNOBS.items():
        if data.source == "synthetic" and task == synthetic.task:
            continue
        keys = [k for k in set_keys(synthetic, "data.synthetic.") if k.split(".")[2] in knobs
                and _at(synthetic, k) != _at(defaults, k)]  # fmt: skip
        if keys:
            shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
            own = data.source == "synthetic"
            why = f"data.synthetic.task is {synthetic.task}" if own else f"data.source is {data.source}"
            reader = "data.synthetic.task" if own else "data.source: synthetic with data.synthetic.task"
            pronoun = "it" if len(keys) == 1 else "them"
            notes.append(f"note: {shown} set, but {why}: ignored ({reader}: {task} reads {pronoun})")
    return notes


def _at(section: BaseModel, dotted: str) -> Any:
    """The value of data.synthetic's `dotted` key (data.synthetic.countdown.count) in `section`."""
    for name in dotted.split(".")[2:]:
        section = getattr(section, name)
    return section


def config_notes(cfg: Any) -> list[str]:
    """`note:` lines for `cfg` (a PipelineConfig): unread sections that were set, task knobs no task reads, fsdp
    over one rank."""
    notes = task_knob_notes(cfg.data)
    method = method_of(cfg)
    for other in other_methods(method):  # the sections it leaves unread (the method that trains reads its own)
        section = other.section
        keys = set_keys(getattr(cfg, section), f"{section}.")
        if keys:
            shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
            notes.append(f"note: {shown} set, but method is {cfg.method}: the {section} section is ignored "
                         f"(method: {other.name} trains with it)")  # fmt: skip
    notes += method.notes(cfg)
    threshold = cfg.eval.correct_threshold
    if threshold <= 0:
        notes.append(f"note: eval.correct_threshold={threshold:g}: a completion counts as correct when its reward is "
                     f"at least {threshold:g}, so with a reward that is never negative (every built-in one) every "
                     "completion is correct and pass@k is 1; set it to what a right answer scores (1 for the "
                     "built-in rewards)")  # fmt: skip
    return notes
