"""The model: load checkpoints (local, hub, s3://), identity by content, LoRA, quantised bases, the tiny model."""
