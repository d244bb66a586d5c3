"""What a check found: the problems that refuse a config, and the notes said beside them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Findings:
    """``problems``: one line each, naming the field (the command refuses the config); ``notes``: what was checked,
    what could not be offline, and `warning:` lines (printed, the config still runs)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: Findings) -> Findings:
        """This, with `other`'s problems and notes after its own."""
        self.problems += other.problems
        self.notes += other.notes
        return self


def s3_spelling(uri: str, field_name: str, found: Findings) -> None:
    """An s3:// URI (a model's, the data's) checked for its spelling only: storage is not contacted offline."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key.strip("/"):
        found.problems.append(f"{field_name}: {uri!r} needs a bucket and a key (s3://bucket/path)")
    else:
        found.notes.append(f"{field_name}: {uri} (spelling checked; storage not contacted)")
