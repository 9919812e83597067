"""The errors the core raises. Each reads as a sentence that tells the model what went wrong and what to do.

`server.py` turns every `MemoryServerError` into an MCP error result in one place; anything else is a bug.
"""

from __future__ import annotations

import json
from pathlib import Path

ECHO_LIMIT = 80  # characters of a caller's value that an error text repeats


class MemoryServerError(Exception):
    """Base of every error the core raises on purpose."""


class EntityNotFoundError(MemoryServerError, LookupError):
    """A call named an entity the graph does not have. The text matches the official server's."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"Entity with name {self.name} not found"


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


class ReadOnlyError(MemoryServerError, PermissionError):
    """A mutating tool was called on a read-only context (or a read-only server)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return f"{self.what} is read-only: this call would change it, so it was refused and nothing was written."


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """`value` quoted for an error text, cut to `limit` characters: an error never grows with what was sent."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    shown = text if len(text) <= limit else text[:limit]
    quoted = repr(shown) if isinstance(value, str) else shown
    return quoted if shown is text else f"{quoted}… ({len(text):,} characters)"
