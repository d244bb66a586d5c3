"""Training: the SFT warm start, the one training path for both methods (essa/ and grpo/ train), the CLI training
jobs, and the training config."""
