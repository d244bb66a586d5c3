"""The one place a `device: auto | cpu | cuda` setting becomes a torch.device."""

from __future__ import annotations

import torch

from essaflow.config_base import ConfigError


def resolve_device(choice: str, field: str = "model.device") -> torch.device:
    """auto -> cuda when torch sees a GPU, else cpu; cuda without one is a ConfigError naming `field`.

    A cuda device carries its index (the current one), so tensors and models placed on it compare equal.
    Raised before anything loads, so a wrong setting costs no weight reading.
    """
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{field}=cuda, but torch sees no CUDA device (use auto or cpu)")
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
