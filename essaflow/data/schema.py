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
    """Free-form extras (source, difficulty, ...); not part of the content, and no reward sees them."""
    fields: dict[str, Any] = {}
    """The task's own named fields, typed as read (numbers, strings, booleans, lists, objects): a source's columns
    beyond id/prompt/answer/solution, under their own names or the ones `data.columns` gives them (Countdown's
    `numbers` and `target`, a code task's `tests`). Part of the content hash; every reward that takes the problem
    receives them (docs/rewards.md)."""

    def content_hash(self) -> str:
        """SHA-256 of the problem's content: the key for deterministic splits."""
        parts: list[Any] = [self.id, self.prompt, self.answer]
        # the solution and fields count only when present, so problems without them keep their hash (and split)
        if self.solution is not None or self.fields:
            parts.append(self.solution)
        if self.fields:
            parts.append(self.fields)
        blob = json.dumps(parts, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def problem_key(self) -> str:
        """SHA-256 of the prompt alone, whitespace runs collapsed: which problem this is, whatever its id, answer
        spelling or solution. Splits and the overlap with `eval.data` use it, so a duplicate row under another id
        lands where the first one does, and a held-out problem copied into the training data is found there."""
        return hashlib.sha256(" ".join(self.prompt.split()).encode()).hexdigest()
