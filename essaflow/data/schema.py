"""The one schema every source is normalised into, and row validation that reports row numbers."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict


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


class BadRowsError(ValueError):
    """Malformed rows in a source, with their (0-based) row numbers and reasons."""

    def __init__(self, source: str, bad: list[tuple[int, str]]):
        self.source = source
        self.bad = bad
        shown = "; ".join(f"row {i}: {why}" for i, why in bad[:20])
        more = f" (and {len(bad) - 20} more)" if len(bad) > 20 else ""
        super().__init__(f"{len(bad)} malformed row(s) in {source}: {shown}{more}")


def normalise_rows(
    rows: list[dict[str, Any]], source: str, on_bad_row: str = "error"
) -> tuple[list[Problem], list[tuple[int, str]]]:
    """Validate raw rows with keys id/prompt/answer(/metadata) into Problems.

    Returns (problems, dropped). With on_bad_row='error' any malformed row raises BadRowsError listing all of
    them; with 'drop' they are dropped and returned so the caller can count and log them. Never silent.
    """
    problems: list[Problem] = []
    bad: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        prompt, answer = row.get("prompt"), row.get("answer")
        rid = row.get("id")
        rid = str(i) if rid is None or rid == "" else str(rid)
        if not isinstance(prompt, str) or not prompt.strip():
            bad.append((i, "prompt is missing or not text"))
            continue
        if answer is None or (isinstance(answer, float) and answer != answer) or str(answer).strip() == "":
            bad.append((i, "answer is missing"))
            continue
        if rid in seen:
            bad.append((i, f"duplicate id {rid!r} (first at row {seen[rid]})"))
            continue
        seen[rid] = i
        meta = row.get("metadata") or {}
        solution = row.get("solution")
        solution = solution.strip() if isinstance(solution, str) and solution.strip() else None
        problems.append(
            Problem(id=rid, prompt=prompt, answer=str(answer).strip(), solution=solution, metadata=dict(meta))
        )
    if bad and on_bad_row == "error":
        raise BadRowsError(source, bad)
    return problems, bad
