"""Methods side by side on one task: one SFT start, several methods x seeds under one training-time budget
(docs/compare.md). This package is pure: the Prefect flow (flows/compare.py) composes it with the pipeline's tasks."""

from essaflow.compare.config import Arm, CompareConfig, MethodSpec, load_compare_config

__all__ = ["Arm", "CompareConfig", "MethodSpec", "load_compare_config"]
