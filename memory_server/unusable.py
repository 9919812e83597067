"""What a person is told about the lines of a memory file that could not be used: which lines and why, and, for
the causes we know, how to bring them back. The server (store.py's warning) and the commands (`check`, `import`)
say it in the same words.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from memory_server.graph import SkippedLine
from memory_server.jsonl import BYTE_ORDER_MARK, CONFLICT_MARKER

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
            *fixes((s.line_number, s.reason) for s in skipped),
        ]
    )


def fixes(lines: Iterable[tuple[int, str]]) -> list[str]:
    """How to fix the unusable lines whose cause is known, given (line number, reason) pairs: one sentence each."""
    reasons: dict[str, list[int]] = {}
    for number, reason in lines:
        reasons.setdefault(reason, []).append(number)
    found = []
    if CONFLICT_MARKER in reasons:
        found.append(
            "The file holds an unfinished git merge: keep the lines you want, delete the markers, `git add` it; "
            "`mcp-memory-contexts install-merge-driver` makes git merge memory files record by record."
        )
    if BYTE_ORDER_MARK in reasons:
        found.append(_byte_order_mark_fix(reasons[BYTE_ORDER_MARK]))
    return found


def _byte_order_mark_fix(numbers: list[int]) -> str:
    # Deleting the line, the generic advice, would lose a record that is whole behind an invisible character. The
    # server does not remove the mark itself: it changes no line it was not asked to change.
    if numbers == [1]:
        return (
            "Line 1 starts with a byte-order mark (an invisible U+FEFF that editors such as Notepad write when they "
            'save "UTF-8 with BOM"; JSON Lines does not allow it): save the file again as "UTF-8", or delete just '
            "that character, not the line, and its record comes back."
        )
    return (
        f"Lines {', '.join(map(str, numbers))} start with a byte-order mark (an invisible U+FEFF, left where files "
        "were joined; JSON Lines does not allow it): delete just that character at the start of each, not the "
        "line, and their records come back."
    )
