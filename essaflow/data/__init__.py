"""Dataset sources normalised into one Problem schema, and deterministic splits."""

from essaflow.data.schema import BadRowsError, Problem
from essaflow.data.sources import load_problems
from essaflow.data.splits import Splits, split_problems

__all__ = ["BadRowsError", "Problem", "Splits", "load_problems", "split_problems"]
