"""Dataset sources normalised into one Problem schema, and deterministic splits."""

from essaflow.data.errors import BadRowsError, DataError, DataFileError
from essaflow.data.fingerprint import data_snapshot_digest, source_fingerprint
from essaflow.data.schema import Problem
from essaflow.data.sources import LoadedProblems, load_problems, read_problems
from essaflow.data.splits import Splits, split_problems

__all__ = [
    "BadRowsError",
    "DataError",
    "DataFileError",
    "LoadedProblems",
    "Problem",
    "Splits",
    "data_snapshot_digest",
    "load_problems",
    "read_problems",
    "source_fingerprint",
    "split_problems",
]
