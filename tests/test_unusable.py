"""What a person is told about unusable lines (unusable.py): the list, and the fixes for causes we know."""

from __future__ import annotations

from pathlib import Path

from memory_server.graph import SkippedLine
from memory_server.jsonl import CONFLICT_MARKER
from memory_server.unusable import MAX_LISTED, describe_skipped, fixes


def test_the_warning_lists_the_first_lines_and_counts_the_rest():
    skipped = [SkippedLine(n, "not valid JSON") for n in range(1, MAX_LISTED + 4)]
    warning = describe_skipped(Path("m.jsonl"), skipped)
    assert warning.startswith(f"Skipped {MAX_LISTED + 3} lines of m.jsonl")
    assert f"line {MAX_LISTED}: not valid JSON; and 3 more" in warning and "kept in the file unchanged" in warning


def test_a_git_conflict_gets_the_way_out_and_other_lines_only_the_generic_advice():
    assert fixes(["not valid JSON (Expecting value at column 1)", "a second, different entity 'Ann'"]) == []
    [fix] = fixes([CONFLICT_MARKER, "not valid JSON", CONFLICT_MARKER])  # once, however many markers
    assert "unfinished git merge" in fix and "install-merge-driver" in fix
    warning = describe_skipped(Path("m.jsonl"), [SkippedLine(1, CONFLICT_MARKER)])
    assert warning.endswith(fix)
