"""The errors a data source raises: one per source, naming the file, the line or row, and the column.

`DataError` is what a retry cannot fix (tasks.retry fails at once on it). A whole-file problem (not UTF-8, not
JSON, not Parquet, empty, a missing column) is a `DataFileError`; malformed rows are collected into one
`BadRowsError` listing them all (or dropped and counted under `data.on_bad_row=drop`).
"""

from __future__ import annotations

SHOWN = 20  # rows quoted in a message; the error object holds them all


class DataError(ValueError):
    """A data source that cannot be read as problems; the message names the source."""


class DataFileError(DataError):
    """The source as a whole is unreadable: the message names the file and, where there is one, line and column."""


class BadRowsError(DataError):
    """Malformed rows in a source: ``bad`` holds (0-based record index, "<line/row>, column <c>: <why>") pairs."""

    def __init__(self, source: str, bad: list[tuple[int, str]], *, all_dropped: bool = False):
        self.source = source
        self.bad = bad
        self.all_dropped = all_dropped
        shown = "; ".join(why for _, why in bad[:SHOWN])
        more = f" (and {len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
        head = (
            f"every row of {source} is malformed ({len(bad)} dropped under data.on_bad_row=drop, none left)"
            if all_dropped
            else f"{len(bad)} malformed row(s) in {source}"
        )
        super().__init__(f"{head}: {shown}{more}")
