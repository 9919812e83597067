"""Where a memory path really leads, and whether the server may read or change what is there.

A memory path may be a symbolic link (a synced folder, a dotfile manager): reads and writes go to the file it
finally names, and the link stays a link. Everything is checked at every call, not only when a context is added,
because links are swapped and files replaced between calls:
- what is there must be a regular file, or nothing yet (a pipe would hang a read, a device never end one);
- reached through a link, it must be named like a memory file (`.jsonl`): a link to ~/.bashrc or to the project's
  package.json is refused;
- for a project context, it must be inside the project's real folder;
- to be changed, the file's own permission must allow writing, and it must have one name only: a rewrite replaces
  the file, which would silently cut a hard link's other names off.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memory_server.errors import MemoryFileError, NotAMemoryFileError, ReadOnlyFileError
from memory_server.files import kind_of

MEMORY_SUFFIX = ".jsonl"
_EUID = getattr(os, "geteuid", lambda: -1)


@dataclass(frozen=True)
class Target:
    path: Path  # the memory path as configured
    real: Path  # the file that is read and written
    st: os.stat_result | None  # None: no file yet

    def require_writable(self) -> None:
        """Refuse a change to a file whose permission bits forbid it or which has other names."""
        if self.st is None:
            return
        if self.st.st_nlink > 1:
            raise NotAMemoryFileError(
                self.path,
                f"{self._named()} has {self.st.st_nlink} hard links (other names for the same file), and the server "
                "replaces a file to change it, which would cut those names off",
                "Keep one name (delete the other links) or use a symbolic link instead of a hard link.",
                action="changed",
            )
        if not _writable(self.real, self.st):
            raise ReadOnlyFileError(self.real, stat.S_IMODE(self.st.st_mode))

    def _named(self) -> str:
        return str(self.path) if self.real == self.path else f"{self.path} (a link to {self.real})"


def find_target(path: Path, allowed_root: Path | None = None) -> Target:
    """Follow `path` to the file it names and check that it may be used as a memory file."""
    path = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    try:
        st: os.stat_result | None = os.lstat(real)
    except FileNotFoundError:
        st = None
    except OSError as problem:
        raise MemoryFileError(path, "read", problem) from problem
    linked = os.path.islink(path)
    shown = f"{path} is a symbolic link to {real}, which is" if linked else f"{path} is"
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise NotAMemoryFileError(path, f"{path} is a chain of symbolic links that never ends", "Fix or remove the links.")
    if st is not None and not stat.S_ISREG(st.st_mode):
        it = f"it is a symbolic link to {real}, which is" if linked else "it is"
        raise NotAMemoryFileError(
            path,
            f"Cannot read memory file {path}: {it} {kind_of(st.st_mode)}, not a regular file",
            "Point the context at a .jsonl memory file.",
        )
    if linked and not real.name.endswith(MEMORY_SUFFIX):
        raise NotAMemoryFileError(
            path,
            f"{shown} not a memory file (its name does not end in {MEMORY_SUFFIX})",
            f"Point the link at a {MEMORY_SUFFIX} memory file, or replace the link with one.",
        )
    if allowed_root is not None:
        root = Path(os.path.realpath(allowed_root))
        if not real.is_relative_to(root):
            raise NotAMemoryFileError(
                path,
                f"{path} leads to {real}, outside the project folder {root}",
                "A project's memory stays inside the project: replace the link with a file, or point it inside.",
            )
    return Target(path, real, st)


def _writable(real: Path, st: os.stat_result) -> bool:
    # os.access asks the kernel for this user; for root, which may write anything, the file's own bits still say
    # whether its owner meant it to be read-only.
    return os.access(real, os.W_OK) and (_EUID() != 0 or bool(st.st_mode & 0o222))
