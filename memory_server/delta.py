"""How a memory file went from one state to the next, as our writers tell the servers that read it after them.

Each write of ours follows a plan (`KnowledgeGraph.plan`): ranges of the old file copied, and new bytes. The
writer keeps, beside the file's lock (an extended attribute of the lock file, like the stamp of its last write in
files.py), the segments that take each of the last few states of the file to the current one: a range of the
older state kept, or a count of new bytes. Another server whose graph is of one of those states reads only the new
bytes and updates its graph (`KnowledgeGraph.patched`), instead of reading and parsing the whole file. Readers
trust an entry only for the exact state they hold (device, inode, size, times) and for the exact state the file
is in now; anything else (a program that is not one of our servers, a file system without extended attributes, a
reader further behind) means reading the whole file, as before.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from memory_server.files import Stamp
from memory_server.graph import Plan, Segment

_ATTRIBUTE = "user.memory-contexts.changes"
KEEP = 8  # states a reader may be behind and still follow
_MAX_BYTES = 3000  # extended attributes share one block of the file system (4 KiB on ext4)


def of_plan(plan: Plan) -> list[Segment]:
    """The segments of a write made by `plan`."""
    segments: list[Segment] = []
    for step in plan:
        _add(segments, step if isinstance(step, tuple) else len(step))
    return segments


def compose(first: Sequence[Segment], second: Sequence[Segment]) -> list[Segment]:
    """The segments from state A to C, given those from A to B and from B to C."""
    starts: list[int] = []  # where each of `first`'s segments begins in B
    position = 0
    for segment in first:
        starts.append(position)
        position += segment if isinstance(segment, int) else segment[1] - segment[0]
    composed: list[Segment] = []
    for segment in second:
        if isinstance(segment, int):
            _add(composed, segment)
            continue
        low, high = segment
        number = max(bisect.bisect_right(starts, low) - 1, 0)
        while low < high and number < len(first):
            piece, begins = first[number], starts[number]
            ends = begins + (piece if isinstance(piece, int) else piece[1] - piece[0])
            part = min(high, ends)
            if part > low:
                kept = (piece[0] + low - begins, piece[0] + part - begins) if isinstance(piece, tuple) else part - low
                _add(composed, kept)
                low = part
            number += 1
    return composed


def new_ranges(segments: Iterable[Segment]) -> list[tuple[int, int]]:
    """Where the new bytes are in the file the segments lead to."""
    ranges, position = [], 0
    for segment in segments:
        if isinstance(segment, int):
            ranges.append((position, position + segment))
            position += segment
        else:
            position += segment[1] - segment[0]
    return ranges


def record(lock_path: Path, before: Stamp | None, after: Stamp, segments: list[Segment]) -> None:
    """After a write that took the file from `before` (None: no file) to `after` by `segments`: keep, for each of
    the last KEEP states, the segments from it to `after`. Call while holding the file's lock."""
    entries: list[tuple[Stamp, list[Segment]]] = []
    if before is not None:
        known = _read(lock_path)
        if known is not None and known[0] == before:  # the chain goes on: every earlier state leads here too
            entries = [(base, compose(steps, segments)) for base, steps in known[1][-(KEEP - 1) :]]
        entries.append((before, segments))
    while True:
        known_states = [[list(base), _plain(steps)] for base, steps in entries]
        value = json.dumps({"to": list(after), "from": known_states}, separators=(",", ":"))
        if len(value) <= _MAX_BYTES or not entries:
            break
        entries.pop(0)
    with contextlib.suppress(AttributeError, OSError):  # no extended attributes here: readers read the whole file
        _setxattr(lock_path, value.encode())


def find(lock_path: Path, base: Stamp, current: Stamp) -> list[Segment] | None:
    """The segments from state `base` to `current`, if our writers recorded them."""
    known = _read(lock_path)
    if known is None or known[0] != current:
        return None
    steps = next((steps for start, steps in known[1] if start == base), None)
    return steps if steps is not None and _fits(steps, base, current) else None


def _fits(steps: list[Segment], base: Stamp, current: Stamp) -> bool:
    """Whether the segments could take a file of `base`'s size to one of `current`'s: a record that does not
    add up (written for another state, or by a writer that raced an outside program) is not trusted."""
    total = 0
    for step in steps:
        if isinstance(step, int):
            total += step
        elif 0 <= step[0] <= step[1] <= base.size:
            total += step[1] - step[0]
        else:
            return False
    return total == current.size


def _read(lock_path: Path) -> tuple[Stamp, list[tuple[Stamp, list[Segment]]]] | None:
    try:
        data = json.loads(_getxattr(lock_path))
        entries = [(Stamp(*base), [_segment(s) for s in steps]) for base, steps in data["from"]]
        return Stamp(*data["to"]), entries
    except (AttributeError, OSError, ValueError, TypeError, KeyError, IndexError):
        return None


def _add(segments: list[Segment], segment: Segment) -> None:
    """Append `segment`, joining it to the last one when they continue each other."""
    last = segments[-1] if segments else None
    if isinstance(segment, int):
        if segment <= 0:
            return
        if isinstance(last, int):
            segments[-1] = last + segment
            return
    elif segment[0] >= segment[1]:
        return
    elif isinstance(last, tuple) and last[1] == segment[0]:
        segments[-1] = (last[0], segment[1])
        return
    segments.append(segment)


def _segment(value: int | list[int]) -> Segment:
    return value if isinstance(value, int) else (int(value[0]), int(value[1]))


def _plain(segments: list[Segment]) -> list[int | list[int]]:
    return [s if isinstance(s, int) else [s[0], s[1]] for s in segments]


def _getxattr(path: Path) -> bytes:
    return os.getxattr(path, _ATTRIBUTE, follow_symlinks=False)


def _setxattr(path: Path, value: bytes) -> None:
    os.setxattr(path, _ATTRIBUTE, value, follow_symlinks=False)
