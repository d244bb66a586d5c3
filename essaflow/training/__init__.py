"""Training: the SFT warm start, the one training path for both methods, resume, usage accounting."""
