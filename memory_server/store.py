"""One memory file: a parsed graph cached while the file is unchanged, and safe writes.

Every mutation runs as *resolve the file -> lock -> re-read if it changed -> apply -> persist*, and persisting checks
that the file is still the one that was read: other programs (git, editors, sync clients) do not take our lock. If
it changed, the change is applied again to what is there now. A file another program is still writing (its last
line incomplete, or changed in place a moment ago) is waited for, within the lock timeout, and never used for a
write before it is complete. Additions are appended when a single small write can hold them (a crash then leaves
the old file or the new one, never half a line); anything else rewrites the file atomically.

Reads reuse the cached graph while the file's stamp is unchanged, which costs one `stat`. When the file changed,
the graph follows it with as little parsing as the change allows:
- another of our servers wrote it: only the new bytes its write recorded (delta.py) are read and parsed;
- it only grew (an append, ours or another program's): the file is read, only the new lines are parsed;
- anything else (git checkout, an editor's save): the file is read, and each line still written exactly as before
  keeps its record; only the other lines are parsed.
The whole file is parsed only the first time, and after `release` (which frees the graph of a store not in use).

`version` counts the graph states this store has held. `changes_since(version)` names the entities and relations
that may differ since then (None: everything may: a first read, a release, or too long ago), from its change log
(changelog.py). Across a reload, a record whose line did not change is the same object, and one whose line changed
is a new object; this process's own mutations change their records in place (and `changes_since` names them like
the rest).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import filelock

from memory_server import delta
from memory_server.changelog import ChangeLog
from memory_server.errors import (
    FileBusyError,
    LockTimeoutError,
    LockUnavailableError,
    MemoryFileError,
    MemoryServerError,
    MergeConflictError,
)
from memory_server.files import (
    FileChangedError,
    Stamp,
    append_checked,
    copy_range,
    lock_path_for,
    locked,
    read_mark,
    read_ranges,
    read_regular,
    remove_legacy_lock,
    remove_stale_temp_files,
    stale_temp_files,
    write_all,
    write_atomically,
    write_mark,
)
from memory_server.graph import Changes, KnowledgeGraph, Plan
from memory_server.jsonl import BOM, CONFLICT_MARKER
from memory_server.target import Target, find_target
from memory_server.unusable import describe_skipped

T = TypeVar("T")
logger = logging.getLogger(__name__)

# A write(2) that stays inside one page of the file is not split by a signal, so an append that fits is
# all-or-nothing even under SIGKILL; larger additions go through the atomic rewrite instead.
_PAGE = 4096
# Another program's change in place is used once the file has been still this long (an editor saving in chunks
# pauses between them); a last line without its newline, which may be the middle of a save, waits longer before
# it is taken for a leftover. A read waits at most READ_PATIENCE for either, then shows the file as it is.
QUIET = 0.25
TAIL_QUIET = 2.0
READ_PATIENCE = 1.0
_POLL = 0.02
# When the call being served arrived (time.monotonic), if it waited behind others: the lock timeout bounds a call as
# its caller sees it, waiting included, not each store operation afresh (queued calls would wait 3, 6, 9 s...).
_CALL_ARRIVED: contextvars.ContextVar[float | None] = contextvars.ContextVar("call_arrived", default=None)


@contextlib.contextmanager
def call_arrived_at(moment: float) -> Iterator[None]:
    """Count the lock timeout of the store operations run inside from `moment` (when the call arrived)."""
    token = _CALL_ARRIVED.set(moment)
    try:
        yield
    finally:
        _CALL_ARRIVED.reset(token)


@dataclass(frozen=True)
class Load:
    """How the graph was last brought up to date with its file (for the debug log, tests and benchmarks)."""

    how: str  # lines parsed: "parsed" every one, "reread" the changed, "grown" the added, "followed" those recorded
    bytes_read: int
    lines_parsed: int


class GraphStore:
    def __init__(self, path: Path, lock_timeout: float = 10.0, allowed_root: Path | None = None) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self.allowed_root = allowed_root  # a project context's folder: the file must stay inside it
        self._locks: dict[Path, filelock.BaseFileLock] = {}
        self._lock_path = Path()  # the lock of the file being worked on, set by _locked
        self._mutex = threading.RLock()  # tool calls run in worker threads
        self._graph: KnowledgeGraph | None = None
        self._stamp: Stamp | None = None
        self._real: Path | None = None  # the file the cached graph was read from
        self._complete = True  # False: the cached graph was read while another program was writing the file
        self._swept: set[Path] = set()
        self._warned = False
        self._notes: dict[str, None] = {}  # warnings for the next result, in order
        self._changes = ChangeLog()  # the graph states this store has held, and what changed from one to the next
        self._previous: KnowledgeGraph | None = None  # a graph forgotten for a re-read: its records may be reused
        self._announced: Stamp | None = None  # the file's state subscribers were last told about
        self.last_used = time.monotonic()
        self.last_load: Load | None = None
        self.loads: Counter[str] = Counter()  # how often each way of loading was taken

    @contextlib.contextmanager
    def reading(self) -> Iterator[KnowledgeGraph]:
        """The graph as the file holds it now, for reading only, while no other thread of ours changes it."""
        with self._turn() as deadline:
            yield self._current(deadline)

    @property
    def version(self) -> int:
        """Counts the graph states this store has held; search indexes key on it."""
        return self._changes.version

    def changes_since(self, version: int) -> Changes | None:
        """The entities and relations that may differ between `version` and now (empty if none), or None when this
        store cannot tell (a first read or a re-read after `release`, or too many versions ago)."""
        with self._mutex:
            return self._changes.since(version)

    def noticed_change(self) -> bool:
        """Whether the file changed since this store last told about it (`announce`): one `stat`, nothing read when
        its size changed. The graph follows the file at the next call that needs it, so an idle server spends next to
        nothing. A file of the same size is read (see `_same_bytes`): `touch`, or a sync client or an editor saving
        the same bytes again, is no change to tell about."""
        try:
            st = os.stat(self.path)
        except OSError:
            now = None
        else:
            now = Stamp.of(st) if stat.S_ISREG(st.st_mode) else None
        if now == self._announced:
            return False
        same = self._same_bytes(now)
        self._announced = now
        return not same

    def announce(self) -> bool:
        """Whether the state this store holds now is one subscribers were not told about yet (they are, from now)."""
        if self._stamp == self._announced:
            return False
        self._announced = self._stamp
        return True

    def release(self) -> bool:
        """Free the parsed graph (the next call reads the file again); False if a call is using the store now or
        there is nothing to free."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            if self._graph is None and self._previous is None:
                return False
            self._graph = self._previous = None
            self._changes.forget()
            self.loads["released"] += 1
            return True
        finally:
            self._mutex.release()

    @property
    def resident_bytes(self) -> int:
        """The size of the file whose parsed graph this store holds (0: none held)."""
        held = self._graph is not None or self._previous is not None
        return self._stamp.size if held and self._stamp is not None else 0

    def mutate(self, change: Callable[[KnowledgeGraph], T]) -> T:
        """Apply `change` to the current graph under the cross-process lock and persist what it edited.

        If the file turns out to have changed when it is written, `change` runs again on a fresh read of it. The
        caller sees only the result of the run that was written (or of the first run, if a later run found its
        work already in the file: an append that reached the file before someone else replaced it).
        """
        with self._turn() as deadline:
            first: list[T] = []
            while True:
                target = find_target(self.path, self.allowed_root)
                with self._locked(target, deadline, writing=True):
                    now = find_target(self.path, self.allowed_root)  # the link may have moved while we waited
                    if now.real != target.real and not deadline.passed:
                        continue
                    now.require_writable()
                    graph = self._load(now, deadline, writing=True)
                    _refuse_unfinished_merge(self.path, graph)
                    try:
                        result = change(graph)
                        if not graph.edits:
                            return first[0] if first else result
                        self._persist(now, graph)
                        return result
                    except FileChangedError as changed:
                        self._forget()
                        if changed.landed and not first:
                            first.append(result)
                        if deadline.passed:
                            raise FileBusyError(now.real, "it kept changing while the server wrote it", deadline.waited)
                    except BaseException:
                        if graph.edits:  # the graph in memory no longer matches the file: read it again next time
                            self._forget()
                        raise

    def take_warning(self) -> str | None:
        """Notes for the next result: lines of this file that could not be used (once per state of the file that
        another writer made), and reads that could not lock the file or found it being written."""
        with self._mutex:
            notes = list(self._notes)
            self._notes.clear()
            if not self._warned and self._graph is not None:
                self._warned = True
                skipped = self._graph.skipped_lines()
                if skipped:
                    notes.insert(0, describe_skipped(self.path, skipped))
            return " ".join(notes) or None

    # ---- internals -----------------------------------------------------------------------------------------

    def _same_bytes(self, now: Stamp | None) -> bool:
        """Whether the file, in state `now`, holds the very bytes of the state subscribers were last told about.
        Only a file of that size can, and only the graph of that state can tell, once it has followed the file
        (False whenever that cannot be told)."""
        told = self._announced if self._announced is not None else self._stamp  # none yet: what calls have read
        if now is None or told is None or now.size != told.size:
            return False
        try:
            with self._turn() as deadline:
                held = self._graph if self._stamp == told else None
                return held is not None and self._current(deadline).same_lines(held) and self._stamp == now
        except MemoryServerError:
            return False  # the call that reads it will say what is wrong

    @contextlib.contextmanager
    def _turn(self) -> Iterator[_Deadline]:
        """This store, for one operation of this process, all of it (waiting included) within the lock timeout."""
        deadline = _Deadline(self.lock_timeout, _CALL_ARRIVED.get())
        if not self._mutex.acquire(timeout=deadline.remaining()):
            raise LockTimeoutError(lock_path_for(Path(os.path.realpath(self.path))), self.lock_timeout)
        try:
            yield deadline
        finally:
            self.last_used = time.monotonic()
            self._mutex.release()

    @contextlib.contextmanager
    def _locked(self, target: Target, deadline: _Deadline, writing: bool) -> Iterator[bool]:
        """Hold the target's lock; True if held. A read goes on without a lock it may not take, or that another
        process holds for longer than READ_PATIENCE, and says so: our writes are atomic (a rename, or an append in
        one write), so the file read is whole, and only a change being made at that moment may be missing."""
        lock_path = self._lock_path = lock_path_for(target.real)  # at every acquisition: `git init` moves it
        lock = self._locks.get(lock_path)
        if lock is None:
            lock = self._locks[lock_path] = filelock.FileLock(lock_path, thread_local=False)
        with contextlib.ExitStack() as stack:
            try:
                wait = deadline if writing else deadline.within(READ_PATIENCE)
                stack.enter_context(locked(lock, wait.remaining(), self.lock_timeout))
            except (LockUnavailableError, LockTimeoutError) as problem:
                if writing:
                    raise
                self._note(problem.read_warning(self.path))
                yield False
                return
            if target.real not in self._swept:  # the first time we hold the lock, clear what a killed writer left
                remove_stale_temp_files(target.real)
                remove_legacy_lock(target.real, lock_path)
                self._swept.add(target.real)
            yield True

    def _current(self, deadline: _Deadline) -> KnowledgeGraph:
        if self._graph is not None and self._stamp is not None and self._stamp == _plain_file_stamp(self.path):
            return self._graph  # the very file read and checked last time, unchanged: one lstat
        target = find_target(self.path, self.allowed_root)
        if self._is_cached(target):
            assert self._graph is not None
            return self._graph
        if target.st is None:  # nothing to read, and nothing created by reading
            return self._keep(target, KnowledgeGraph(), None, None)
        lock_path = lock_path_for(target.real)
        if not os.path.lexists(lock_path) and not stale_temp_files(target.real):
            # No writer of ours has been here: reading creates no lock file (outside git, one in the user's folder).
            # A writer starting now appends in one write or renames; _load waits for an incomplete last line.
            self._lock_path = lock_path
            return self._load(target, deadline, writing=False)
        # Read under the lock so a concurrent append of ours is never seen half-written.
        with self._locked(target, deadline, writing=False):
            return self._load(find_target(self.path, self.allowed_root), deadline, writing=False)

    def _is_cached(self, target: Target) -> bool:
        if self._graph is None or self._real != target.real:
            return False
        return self._stamp == (Stamp.of(target.st) if target.st is not None else None)

    def _load(self, target: Target, deadline: _Deadline, writing: bool) -> KnowledgeGraph:
        """The graph of the file as it is now: the cached one if the file is unchanged, else read again, waiting
        while another program is still writing it."""
        if self._is_cached(target) and (self._complete or not writing):
            assert self._graph is not None
            return self._graph
        followed = self._follow(target)
        if followed is not None:
            return followed
        patience = deadline if writing else deadline.within(READ_PATIENCE)
        mark = read_mark(self._lock_path)
        first_seen: dict[Stamp, float] = {}
        while True:
            try:
                data, stamp = read_regular(target.real)
            except FileNotFoundError:
                return self._keep(target, KnowledgeGraph(), None, None)
            except FileChangedError:
                busy: str | None = "it changed while it was read"
            except OSError as problem:
                raise MemoryFileError(self.path, "read", problem) from problem
            else:
                busy = self._still_being_written(data, stamp, mark, first_seen)
            if busy is None or patience.passed:
                break
            time.sleep(_POLL)
        if busy is not None and writing:
            raise FileBusyError(target.real, busy, deadline.waited)
        if busy is not None:
            self._note(
                f"{self.path} is being written by another program ({busy}); this result shows it as it was at that "
                "moment and may be incomplete."
            )
            if busy == "it changed while it was read":
                return self._graph if self._graph is not None else KnowledgeGraph()
        previous = self._graph if self._graph is not None else self._previous
        self._graph = self._previous = None  # its records become the new graph's: never use it again
        graph, changes = KnowledgeGraph.reread(data, previous)
        self._keep(target, graph, changes, stamp, len(data))
        self._complete = busy is None
        return graph

    def _follow(self, target: Target) -> KnowledgeGraph | None:
        """The graph of the file as another of our servers left it, from the new bytes its write recorded."""
        graph = self._graph
        if graph is None or not self._complete or self._real != target.real or None in (self._stamp, target.st):
            return None
        current = Stamp.of(target.st)  # type: ignore[arg-type]
        segments = delta.find(self._lock_path, self._stamp, current)  # type: ignore[arg-type]
        if segments is None:
            return None
        try:
            chunks = read_ranges(target.real, delta.new_ranges(segments), current)
        except (FileChangedError, OSError):
            return None
        followed = graph.patched(segments, chunks)
        if followed is None:
            return None
        followed[0].built_by = "followed"
        return self._keep(target, *followed, current, sum(map(len, chunks)))

    def _still_being_written(
        self, data: bytes, stamp: Stamp, mark: Stamp | None, first_seen: dict[Stamp, float]
    ) -> str | None:
        """Why the file may be in the middle of another program's save, or None if it is complete."""
        if stamp == mark:
            return None  # written by one of our servers, completely, under the lock
        seen = first_seen.setdefault(stamp, time.monotonic())
        still_for = max(time.monotonic() - seen, (time.time_ns() - stamp.mtime_ns) / 1e9)
        if still_for < TAIL_QUIET and _incomplete_tail(data):
            return "its last line is incomplete"
        known = self._stamp
        in_place = known is None or known[:2] == stamp[:2]  # same file changed, or one we never saw complete
        if in_place and still_for < QUIET:
            return "it was changed in place a moment ago"
        return None

    def _keep(
        self, target: Target, graph: KnowledgeGraph, changes: Changes | None, stamp: Stamp | None, read: int = 0
    ) -> KnowledgeGraph:
        self._graph, self._stamp, self._real, self._complete = graph, stamp, target.real, True
        self._previous = None
        self._warned = False
        self._changes.advance(changes)
        self.last_load = Load(graph.built_by, read, graph.parsed_lines)
        self.loads[graph.built_by] += 1
        logger.debug(
            "%s: %s, %d bytes read, %d lines parsed (version %d)",
            self.path,
            graph.built_by,
            read,
            graph.parsed_lines,
            self.version,
        )
        return graph

    def _forget(self) -> None:
        """The graph no longer matches the file (a write failed or found the file changed): read the file again at
        the next call, reusing the records of the lines that are still the same."""
        if self._graph is not None:
            self._changes.carry(self._graph.edits.changes())
            self._previous = self._graph
        self._graph = None

    def _note(self, note: str) -> None:
        self._notes[note] = None

    def _persist(self, target: Target, graph: KnowledgeGraph) -> None:
        plan = graph.plan()
        expected = self._stamp
        try:
            added = _appended_bytes(plan, expected.size if expected else 0)
            if added is not None and expected is not None and expected.size % _PAGE + len(added) <= _PAGE:
                stamp = append_checked(target.real, added, expected)
            else:
                stamp = write_atomically(target.real, lambda fd: self._write_plan(fd, plan, target), expected)
        except OSError as problem:
            raise MemoryFileError(self.path, "write", problem) from problem
        changes = graph.edits.changes()
        graph.written()
        self._stamp = stamp
        delta.record(self._lock_path, expected, stamp, delta.of_plan(plan))
        write_mark(self._lock_path, stamp)
        self._changes.advance(changes)

    def _write_plan(self, out: int, plan: Plan, target: Target) -> None:
        """Write the new file: copy the unchanged ranges from the current file, write the new bytes."""
        if all(isinstance(step, bytes) for step in plan):
            write_all(out, b"".join(plan))  # type: ignore[arg-type]
            return
        source = os.open(target.real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            if self._stamp is None or not self._stamp.exactly(os.fstat(source)):
                raise FileChangedError()
            for step in plan:
                if isinstance(step, bytes):
                    write_all(out, step)
                else:
                    copy_range(source, out, *step)
        finally:
            os.close(source)


class _Deadline:
    def __init__(self, seconds: float, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.end = self.start + max(seconds, 0)

    def remaining(self) -> float:
        return max(self.end - time.monotonic(), 0.0)

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.end

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start

    def within(self, seconds: float) -> _Deadline:
        sooner = _Deadline(0)
        sooner.start, sooner.end = self.start, min(self.end, time.monotonic() + seconds)
        return sooner


def _refuse_unfinished_merge(path: Path, graph: KnowledgeGraph) -> None:
    """Refuse to change a file that holds git's conflict markers: its records are both sides' versions of them."""
    markers = [line.line_number for line in graph.skipped_lines() if line.reason == CONFLICT_MARKER]
    if markers:
        raise MergeConflictError(path, markers)


def _plain_file_stamp(path: Path) -> Stamp | None:
    """The stamp of `path` if it is a regular file (not a link), else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return Stamp.of(st) if stat.S_ISREG(st.st_mode) else None


def _incomplete_tail(data: bytes) -> bool:
    """True if the file ends in a line that has no newline and is not a whole JSON value (a file the official
    server wrote has no final newline, but its last line is complete)."""
    if not data or data.endswith(b"\n"):
        return False
    last = data[data.rfind(b"\n") + 1 :].removeprefix(BOM)  # a Windows tool's first line: json.loads refuses it
    if not last.strip():
        return False
    try:
        json.loads(last.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return True
    return False


def _appended_bytes(plan: Plan, size: int) -> bytes | None:
    """The bytes to append when the plan keeps the whole current file as it is, else None."""
    steps = plan[1:] if plan and plan[0] == (0, size) else plan
    if size and steps is plan:
        return None
    if not all(isinstance(step, bytes) for step in steps):
        return None
    return b"".join(steps)  # type: ignore[arg-type]
