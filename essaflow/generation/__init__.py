"""Generation: the engine interface (transformers, vLLM) and how a prompt meets the model."""
