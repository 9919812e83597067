"""What a person is told about the lines of a memory file that could not be used: which lines and why, and, for
the causes we know, how to bring them back. The server (store.py's warning) and the commands (`check`, `import`)
say it in the same words.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from memory_server.graph import SkippedLine
from memory_server.jsonl import CONFLICT_MARKER

MAX_LISTED = 10


def describe_skipped(path: Path, skipped: list[SkippedLine]) -> str:
    """The warning a result carries about the lines of `path` it could not use."""
    listed = "; ".join(f"line {s.line_number}: {s.reason}" for s in skipped[:MAX_LISTED])
    more = f"; and {len(skipped) - MAX_LISTED} more" if len(skipped) > MAX_LISTED else ""
    lines = "1 line" if len(skipped) == 1 else f"{len(skipped)} lines"
    return " ".join(
        [
            f"Skipped {lines} of {path} that could not be read ({listed}{more}). They are kept in the file unchanged; "
            "fix or delete them by hand to bring them back into the graph.",
            *fixes(s.reason for s in skipped),
        ]
    )


def fixes(reasons: Iterable[str]) -> list[str]:
    """How to fix the unusable lines whose cause is known, given their reasons: one sentence per cause."""
    found = []
    if CONFLICT_MARKER in set(reasons):
        found.append(
            "The file holds an unfinished git merge, and writes to it are refused until it is finished: keep the "
            "lines you want, delete the markers, `git add` it; `mcp-memory-contexts install-merge-driver` makes git "
            "merge memory files record by record (`git checkout -m -- FILE` then redoes this merge with it, "
            "replacing hand edits)."
        )
    return found
