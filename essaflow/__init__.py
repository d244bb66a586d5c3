"""essaflow: ESSA and F-GRPO fine-tuning on verifiable rewards. The library never imports prefect."""

__version__ = "0.1.0"
