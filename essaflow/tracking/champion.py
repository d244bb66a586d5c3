"""The champion, scored on this run's problems under this run's protocol, so the gate compares like with like.

A registered version records what its own evaluation judged (`EVAL_TAGS`: the problem set's and the protocol's
digests, and where its per-problem report is stored). When both digests equal the current run's, that report holds
the counts a fresh evaluation would give (same problems, same protocol, same seed) and is reused; otherwise the
champion is downloaded from the registry and evaluated again (essaflow/judging/registered.py), with the prompt
formatting its version stores.
"""

from __future__ import annotations

EVAL_TAGS = {
    "problems": "essaflow.eval_problems_digest",
    "protocol": "essaflow.eval_protocol_digest",
    "report": "essaflow.eval_report_uri",
}
"""What a version's own evaluation judged -> the version tag recording it."""


def eval_identity_tags(problems_digest: str, protocol_digest: str, report_uri: str) -> dict[str, str]:
    """The version tags that let a later run reuse this version's per-problem counts."""
    values = {"problems": problems_digest, "protocol": protocol_digest, "report": report_uri}
    return {EVAL_TAGS[k]: v for k, v in values.items()}


def reusable_report_uri(version_tags: dict[str, str], problems_digest: str, protocol_digest: str) -> str | None:
    """The stored report of a version whose recorded problem set and protocol match these digests, else None."""
    if version_tags.get(EVAL_TAGS["problems"]) != problems_digest:
        return None
    if version_tags.get(EVAL_TAGS["protocol"]) != protocol_digest:
        return None
    return version_tags.get(EVAL_TAGS["report"]) or None
