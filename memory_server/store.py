"""One memory file: a parsed graph cached while the file is unchanged, and safe writes.

Every mutation runs as *lock -> re-read if another process changed the file -> apply -> persist*. Additions are
appended when a single small write can hold them (a crash then leaves the old file or the new one, never half a
line); anything else rewrites the file atomically. Reads reuse the cached graph while the file's stamp (inode,
size, mtime) is unchanged, which costs one `stat`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import filelock

from memory_server.errors import MemoryFileError
from memory_server.files import (
    Stamp,
    copy_range,
    lock_path_for,
    locked,
    remove_legacy_lock,
    remove_stale_temp_files,
    stamp_of,
    write_all,
    write_atomically,
)
from memory_server.graph import KnowledgeGraph, Plan, SkippedLine

T = TypeVar("T")

# A write(2) that stays inside one page of the file is not split by a signal, so an append that fits is
# all-or-nothing even under SIGKILL; larger additions go through the atomic rewrite instead.
_PAGE = 4096
_MAX_LISTED_PROBLEMS = 10


class GraphStore:
    def __init__(self, path: Path, lock_timeout: float = 10.0) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self._mutex = threading.RLock()  # tool calls run in worker threads
        self._graph: KnowledgeGraph | None = None
        self._stamp: Stamp | None = None
        self._swept = False
        self._warned = False
        self.version = 0  # counts the graph states this store has held; search indexes key on it

    @contextlib.contextmanager
    def reading(self) -> Iterator[KnowledgeGraph]:
        """The graph as the file holds it now, for reading only, while no other thread of ours changes it."""
        with self._mutex:
            if self._graph is None or self._stamp != stamp_of(self.path):
                self._reload(lock=True)
            assert self._graph is not None
            yield self._graph

    def refresh(self) -> bool:
        """Re-read the file if someone else changed it since we last read or wrote it; True if so."""
        with self._mutex:
            if self._graph is not None and self._stamp == stamp_of(self.path):
                return False
            self._reload(lock=True)
            return True

    def mutate(self, change: Callable[[KnowledgeGraph], T]) -> T:
        """Apply `change` to the current graph under the cross-process lock and persist what it edited."""
        with self._mutex, self._locked():
            if self._graph is None or self._stamp != stamp_of(self.path):
                self._reload(lock=False)
            graph = self._graph
            assert graph is not None
            try:
                result = change(graph)
                if graph.edits:
                    self._persist(graph)
            except BaseException:
                if graph.edits:  # the graph in memory no longer matches the file: read it again next time
                    self._graph = None
                raise
            return result

    def take_warning(self) -> str | None:
        """A note on the lines this file could not use, given once per state of the file that another writer made."""
        with self._mutex:
            if self._warned or self._graph is None:
                return None
            self._warned = True
            skipped = self._graph.skipped_lines()
            return describe_skipped(self.path, skipped) if skipped else None

    # ---- internals -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = lock_path_for(self.path)  # at every acquisition: a `git init` around the file moves it
        with locked(filelock.FileLock(lock_path, thread_local=False), self.lock_timeout):
            if not self._swept:  # the first time we hold the lock, clear what a killed writer left behind
                remove_stale_temp_files(self.path)
                remove_legacy_lock(self.path, lock_path)
                self._swept = True
            yield

    def _reload(self, lock: bool) -> None:
        stamp = stamp_of(self.path)
        if stamp is None:
            self._graph, self._stamp = KnowledgeGraph(), None
            self.version += 1
            return
        # Read under the lock so a concurrent append is never seen half-written; a folder we may not lock
        # (read-only media) is still readable.
        writable = os.access(self.path.parent, os.W_OK)
        with self._locked() if lock and writable else contextlib.nullcontext():
            try:
                with open(self.path, "rb") as file:
                    data = file.read()
                    stamp = Stamp.of(os.fstat(file.fileno()))
            except OSError as problem:
                raise MemoryFileError(self.path, "read", problem) from problem
        self._graph = KnowledgeGraph.parse(data)
        self.version += 1
        self._stamp = stamp
        self._warned = False

    def _persist(self, graph: KnowledgeGraph) -> None:
        plan = graph.plan()
        try:
            added = _appended_bytes(plan, self._stamp.size if self._stamp else 0)
            if added is not None and self._stamp is not None and self._stamp.size % _PAGE + len(added) <= _PAGE:
                self._append(added)
            else:
                write_atomically(self.path, lambda fd: self._write_plan(fd, plan))
        except OSError as problem:
            raise MemoryFileError(self.path, "write", problem) from problem
        graph.written()
        self.version += 1
        self._stamp = stamp_of(self.path)

    def _write_plan(self, target: int, plan: Plan) -> None:
        """Write the new file: copy the unchanged ranges from the current file, write the new bytes."""
        if all(isinstance(step, bytes) for step in plan):
            write_all(target, b"".join(plan))  # type: ignore[arg-type]
            return
        source = os.open(self.path, os.O_RDONLY)
        try:
            if Stamp.of(os.fstat(source)) != self._stamp:
                raise OSError(errno.EAGAIN, "the file was changed by a program that does not lock it; try again")
            for step in plan:
                if isinstance(step, bytes):
                    write_all(target, step)
                else:
                    copy_range(source, target, *step)
        finally:
            os.close(source)

    def _append(self, payload: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, payload)
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, size)  # leave the file exactly as it was
                raise
        finally:
            os.close(fd)


def _appended_bytes(plan: Plan, size: int) -> bytes | None:
    """The bytes to append when the plan keeps the whole current file as it is, else None."""
    steps = plan[1:] if plan and plan[0] == (0, size) else plan
    if size and steps is plan:
        return None
    if not all(isinstance(step, bytes) for step in steps):
        return None
    return b"".join(steps)  # type: ignore[arg-type]


def describe_skipped(path: Path, skipped: list[SkippedLine]) -> str:
    listed = "; ".join(f"line {s.line_number}: {s.reason}" for s in skipped[:_MAX_LISTED_PROBLEMS])
    more = f"; and {len(skipped) - _MAX_LISTED_PROBLEMS} more" if len(skipped) > _MAX_LISTED_PROBLEMS else ""
    lines = "1 line" if len(skipped) == 1 else f"{len(skipped)} lines"
    return (
        f"Skipped {lines} of {path} that could not be read ({listed}{more}). "
        "They are kept in the file unchanged; fix or delete them by hand to bring them back into the graph."
    )
