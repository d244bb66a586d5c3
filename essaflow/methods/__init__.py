"""The training methods, each a registered object (essaflow/methods/base.py says what one holds).

    essa    essaflow/methods/essa.py      ESSA        -> essaflow/essa/  (section `essa`, `essaflow essa`)
    fgrpo   essaflow/methods/fgrpo.py     F-GRPO      -> essaflow/grpo/  (section `grpo`, `essaflow grpo`)
    none    essaflow/methods/sft_only.py  SFT only       (nothing trains after the SFT warm start)

A stage asks `method_of(cfg)` instead of branching on `cfg.method`. A new method is its package, its object here
(one registration below) and its config section on PipelineConfig (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from essaflow.methods.base import Method
from essaflow.methods.essa import ESSA
from essaflow.methods.fgrpo import FGRPO
from essaflow.methods.sft_only import SFT_ONLY
from essaflow.registry import Registry

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig

__all__ = ["ESSA", "FGRPO", "METHODS", "SFT_ONLY", "Method", "TrainedMethodName", "method_of", "other_methods"]

METHODS: Registry[Method] = Registry("method")
"""name -> method object; `METHODS.get(name)`, an unknown name listing the known ones."""
for _registered in (ESSA, FGRPO, SFT_ONLY):
    METHODS.register(_registered.name)(_registered)

TrainedMethodName = Literal[tuple(n for n in METHODS if METHODS.get(n).trains)]  # type: ignore[valid-type]
"""The names of the methods that train (a compare config's `method:`)."""


def method_of(cfg: PipelineConfig) -> Method:
    """The method object `cfg.method` names."""
    return METHODS.get(cfg.method)


def other_methods(method: Method) -> list[Method]:
    """The methods that train, other than `method`, in registration order: whose sections `method` leaves unread."""
    return [m for m in (METHODS.get(n) for n in METHODS) if m.trains and m is not method]
