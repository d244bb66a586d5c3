"""The one schema every source is normalised into (rows are validated in essaflow.data.rows)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from essaflow.data.errors import BadRowsError  # noqa: F401 - its old home; import it from essaflow.data


class Problem(BaseModel):
    """One verifiable problem: a prompt and its reference answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Stable identifier, unique within a dataset."""
    prompt: str
    """Text given to the model."""
    answer: str
    """Reference answer the reward compares against."""
    solution: str | None = None
    """The source's worked solution when it has one (GSM8K's answer text, MATH's solution): what SFT trains on
    with sft.target=solution. The reward still judges `answer`."""
    metadata: dict[str, Any] = {}
    """Free-form extras (source, difficulty, ...)."""

    def content_hash(self) -> str:
        """SHA-256 of the problem's content: the key for deterministic splits."""
        fields = [self.id, self.prompt, self.answer]
        # the solution counts only when present, so problems without one keep their hash (and their split)
        blob = json.dumps(fields if self.solution is None else [*fields, self.solution], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def problem_key(self) -> str:
        """SHA-256 of the prompt alone, whitespace runs collapsed: which problem this is, whatever its id, answer
        spelling or solution. Splits and the overlap with `eval.data` use it, so a duplicate row under another id
        lands where the first one does, and a held-out problem copied into the training data is found there."""
        return hashlib.sha256(" ".join(self.prompt.split()).encode()).hexdigest()
