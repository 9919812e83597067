"""The errors the core raises. Each reads as a sentence that tells the model what went wrong and what to do.

`server.py` turns every `MemoryServerError` into an MCP error result in one place; anything else is a bug.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

ECHO_LIMIT = 80  # characters of a caller's value that an error text repeats
LIST_LIMIT = 10  # values of a list that an error text repeats


class MemoryServerError(Exception):
    """Base of every error the core raises on purpose."""

    def explained(self) -> str:
        """What a tool's error result says: the message, and what to do when the message alone does not."""
        return str(self)


class EntityNotFoundError(MemoryServerError, LookupError):
    """A call named an entity the graph does not have. The text matches the official server's; the result adds the
    names the call may have meant (`meant`) and how to go on."""

    def __init__(self, name: str, meant: Sequence[str] = ()) -> None:
        super().__init__(name)
        self.name = name
        self.meant = list(meant)

    def __str__(self) -> str:
        return f"Entity with name {shortened(self.name)} not found"

    def explained(self) -> str:
        meant = f" Did you mean {' or '.join(echo(name) for name in self.meant)}?" if self.meant else ""
        return f"{self}.{meant} Names match exactly; create_entities makes a new entity. Nothing was changed."


class MemoryFileError(MemoryServerError, OSError):
    """A memory file could not be read or written. The file on disk is left as it was."""

    def __init__(self, path: Path, action: str, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.path = path
        self.action = action
        self.cause = cause

    def __str__(self) -> str:
        reason = self.cause.strerror if isinstance(self.cause, OSError) and self.cause.strerror else self.cause
        return (
            f"Cannot {self.action} memory file {self.path}: {reason}. "
            "Nothing was changed; check that the folder exists, is writable and has free space, "
            "or point the server at another file."
        )


class LockTimeoutError(MemoryServerError, TimeoutError):
    """Another process held a memory file's lock for longer than the timeout."""

    def __init__(self, lock_path: Path, timeout: float) -> None:
        super().__init__(str(lock_path))
        self.lock_path = lock_path
        self.timeout = timeout

    def __str__(self) -> str:
        return (
            f"Could not lock {self.lock_path} within {self.timeout:g} s: another process is writing this memory. "
            "Nothing was changed; try the call again."
        )

    def read_warning(self, path: Path) -> str:
        return (
            f"{path} was read without its lock: another process has held {self.lock_path} for a while, so a change "
            "it is making at this moment may be missing; writes wait for it (up to the lock timeout)."
        )


class ReadOnlyError(MemoryServerError, PermissionError):
    """A mutating tool was called on a read-only context (or a read-only server)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return f"{self.what} is read-only: this call would change it, so it was refused and nothing was written."


class NotAMemoryFileError(MemoryServerError, ValueError):
    """A memory path leads to something that must not be read or written as memory: a special file, a link to a
    file that is not a `.jsonl` memory file, a file outside the place its context allows, a hard-linked file."""

    def __init__(self, path: Path, problem: str, fix: str, action: str = "read or written") -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem
        self.fix = fix
        self.action = action

    def __str__(self) -> str:
        return f"{self.problem}. Nothing was {self.action}. {self.fix}"


class ReadOnlyFileError(MemoryServerError, PermissionError):
    """The memory file itself is not writable (its mode, or its owner): mutating tools are refused."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(str(path))
        self.path = path
        self.mode = mode

    def __str__(self) -> str:
        return (
            f"{self.path} is read-only (mode {self.mode:04o}), so this call, which would change it, was refused and "
            f"nothing was written. Make it writable (chmod u+w {self.path}) to change this memory."
        )


class MergeConflictError(MemoryServerError, PermissionError):
    """A write to a memory file that holds an unfinished git merge: refused, so that neither side is lost or picked
    (a write changes the first version of a record, and merges or drops a second one)."""

    def __init__(self, path: Path, lines: Sequence[int]) -> None:
        super().__init__(str(path))
        self.path = path
        self.lines = list(lines)

    def __str__(self) -> str:
        lines = listed([f"{line:,}" for line in self.lines])
        return (
            f"{self.path} holds an unfinished git merge (conflict markers on line{'s' * (len(self.lines) > 1)} "
            f"{lines}). Nothing was written: a write now would change one side's lines and merge or "
            "drop the other's. Finish the merge, then try again: keep the lines you want, delete the markers and "
            "`git add` the file; or, in its repository, `mcp-memory-contexts install-merge-driver` and "
            f"`git checkout -m -- {self.path}` (which redoes the merge record by record, replacing any hand edits "
            "made to the file since), then `git add` it. Reading it still works."
        )


class FileBusyError(MemoryServerError, TimeoutError):
    """Another program was still writing the memory file when the lock timeout ran out."""

    def __init__(self, path: Path, why: str, waited: float) -> None:
        super().__init__(str(path))
        self.path = path
        self.why = why
        self.waited = waited

    def __str__(self) -> str:
        return (
            f"{self.path} is being written by another program ({self.why}; waited {self.waited:.1f} s). "
            "Nothing was changed, so that program's save is not cut short; try the call again in a moment."
        )


class LockUnavailableError(MemoryServerError, PermissionError):
    """The lock file cannot be used: it is a symbolic link or a special file, or this user may not open it."""

    def __init__(self, lock_path: Path, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.lock_path = lock_path
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"Cannot lock {self.lock_path}: {self.problem}. Nothing was changed; reading still works. {self.fix}"

    def read_warning(self, path: Path) -> str:
        return (
            f"{path} was read without its lock ({self.lock_path}: {self.problem}), so a change another server was "
            f"making at that moment may be missing; writes to it are refused until this is fixed. {self.fix}"
        )


def shortened(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` as it is when short, else its start and its length: `Lorem ipsum… (500,000 characters)`."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def listed(values: Sequence[str], limit: int = LIST_LIMIT) -> str:
    """Values for a message, each shortened, at most `limit` of them: `a, b, c and 4,980 more`."""
    shown = ", ".join(shortened(value) for value in values[:limit])
    return shown + (f" and {len(values) - limit:,} more" if len(values) > limit else "")


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """`value` quoted for an error text, cut to `limit` characters: an error never grows with what was sent."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    shown = text if len(text) <= limit else text[:limit]
    quoted = repr(shown) if isinstance(value, str) else shown
    return quoted if shown is text else f"{quoted}… ({len(text):,} characters)"
