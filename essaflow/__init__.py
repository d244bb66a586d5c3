"""essaflow: ESSA and F-GRPO fine-tuning on verifiable rewards. The library never imports prefect."""

import logging

__version__ = "0.1.0"

# peft imports torchao (model.quantization) whenever it is installed, and torchao then warns about every CUDA-only
# kernel it cannot load on a CPU machine, and torch about torchao's enum registrations: noise on every command.
for _noisy in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)
