"""essaflow.registry: one decorated function registers a variant; lookups name the known ones; entries travel."""

from __future__ import annotations

import pickle

import pytest

from essaflow.grpo.losses import LOSSES, ClipRange, resolve_clip
from essaflow.registry import Registry, UnknownName


def double(x: int) -> int:
    return 2 * x


def test_register_get_and_the_mapping_views():
    reg: Registry = Registry("widget")
    assert reg.register("double", colour="red")(double) is double  # the decorator leaves the function as it is
    assert reg.get("double")(3) == 6 and reg.meta("double") == {"colour": "red"}
    assert "double" in reg and "triple" not in reg
    assert sorted(reg) == reg.names() == ["double"] and len(reg) == 1
    assert reg["double"].fn is double


def test_an_unknown_name_lists_the_known_ones_as_key_error_and_value_error():
    reg: Registry = Registry("widget")
    reg.register("b")(double)
    reg.register("a")(double)
    with pytest.raises(UnknownName) as ei:
        reg.get("c")
    assert str(ei.value) == "unknown widget 'c'; known: ['a', 'b']"
    assert isinstance(ei.value, KeyError) and isinstance(ei.value, ValueError)


def test_an_entry_shipped_to_another_process_keeps_its_metadata():
    """What grpo.distributed does: send `registry[name]`, `setdefault` it in the worker's registry."""
    driver: Registry = Registry("widget")
    driver.register("double", colour="red")(double)
    worker: Registry = Registry("widget")
    worker.setdefault("double", pickle.loads(pickle.dumps(driver["double"])))
    assert worker.get("double")(2) == 4 and worker.meta("double") == {"colour": "red"}
    assert driver.pop("double").fn is double and "double" not in driver


def test_loss_clip_defaults_are_registry_metadata():
    assert LOSSES.meta("dapo") == {"clip_low": 0.2, "clip_high": 0.28}
    assert resolve_clip("cispo", None, 3.0) == ClipRange(1.0, 3.0)


def test_the_builtin_names_a_config_checks_without_torch_are_the_registered_ones():
    from essaflow.grpo.advantages import ADVANTAGES
    from essaflow.grpo.config import BUILTIN_ADVANTAGES, BUILTIN_LOSSES

    assert sorted(BUILTIN_LOSSES) == LOSSES.names() and sorted(BUILTIN_ADVANTAGES) == ADVANTAGES.names()
