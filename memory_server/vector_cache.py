"""The vectors of one memory's documents on disk, so that unchanged text is not embedded again after a restart.

Each memory file (by its real path) has its own cache per model: `<cache folder>/<model>/<memory>.vectors`, a header
then records (the text's key, its vector, a check), appended as texts are embedded. Nothing reads a cache but an
index of its own memory being built, and that reads it in chunks, taking only the vectors it needs: a server never
holds another memory's vectors, nor a whole file. When a cache holds many more records than its memory has
documents (vectors of text since changed or deleted), it is rewritten with only those in use.

Vectors are stored as the model made them (float32), so one read back is the very vector the model gives: where a
vector came from never moves a ranking. A record that fails its check (a crash tore it) is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from memory_server.errors import MemoryServerError
from memory_server.files import lock_path_for, locked, remove_stale_temp_files, write_all, write_atomically
from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

logger = logging.getLogger(__name__)

MAGIC = b"memory-contexts vectors 1\n"
HEADER = 512  # bytes: the magic line, then a JSON line, padded with spaces
CHUNK = 4096  # records read or written at a time
LOCK_TIMEOUT = 1.0  # seconds; an append that cannot have the lock waits for the next one
PRUNE_AT = 1.5  # a cache with this many times the records its memory uses is rewritten with those alone
PRUNE_SLACK = 1024  # records a cache may hold beyond that
MAX_WAITING = 65536  # records kept in memory while the lock is busy; beyond, they are left for the next run
ORPHAN_AGE = 30 * 86400  # seconds: a cache whose memory file is gone is deleted once untouched this long
_swept: set[Path] = set()


def memory_key(memory: Path) -> str:
    """Names a memory's cache: a hash of the file's real path."""
    real = os.path.realpath(memory)
    return hashlib.blake2b(real.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def text_keys(texts: Iterable[str]) -> np.ndarray:
    """The key of each text: 16 bytes of its BLAKE2b hash."""
    return np.array(
        [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in texts], dtype="S16"
    )


@dataclass(frozen=True)
class CacheFile:
    """What `stats` says of a cache: its file, size, records and model."""

    path: Path
    bytes: int
    records: int
    model: str


def caches_of(folder: Path, memory: Path) -> list[CacheFile]:
    """The caches of `memory` in `folder` (one per model it was searched with)."""
    found = []
    for path in sorted(folder.glob(f"*/{memory_key(memory)}.vectors")):
        with contextlib.suppress(OSError, ValueError):
            header = _read_header(path)
            size = path.stat().st_size
            found.append(CacheFile(path, size, (size - HEADER) // _record(header["dim"]).itemsize, header["model"]))
    return found


class VectorCache:
    """The cache of one memory for one model."""

    def __init__(self, folder: Path, memory: Path, model: str, dim: int) -> None:
        self.path = folder / f"{memory_key(memory)}.vectors"
        self.header = {"model": model, "dim": dim, "memory": os.path.realpath(memory)}
        self._record = _record(dim)
        self._lock = filelock.FileLock(lock_path_for(self.path), thread_local=False)
        self._waiting: list[np.ndarray] = []  # records not appended yet: the lock was busy
        self._failing = False  # the last write failed: said once, not at every batch of a memory read whole

    def read(self, keys: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """For the keys the cache holds: their positions in `keys` and their vectors, a chunk at a time."""
        if not len(keys):
            return
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (closed below, a generator cannot use `with` across yields)
        except OSError:
            return
        with handle:
            header = handle.read(HEADER)
            if len(header) < HEADER:  # empty, or another process is making it (reads take no lock): nothing yet
                return
            try:
                if not self._fits(_parse_header(header)):
                    return
            except ValueError as problem:
                logger.warning("Ignoring the vector cache %s: %s", self.path, problem)
                return
            prefixes = _prefixes(keys)  # searched as integers, then checked whole
            order = np.argsort(prefixes)
            ordered, ordered_keys = prefixes[order], keys[order]
            while True:
                data = handle.read(CHUNK * self._record.itemsize)
                records = np.frombuffer(data[: len(data) - len(data) % self._record.itemsize], dtype=self._record)
                if not len(records):
                    return
                found = records["key"]
                at = np.minimum(np.searchsorted(ordered, _prefixes(found)), len(ordered) - 1)
                hit = ordered_keys[at] == found
                hit[hit] &= records["check"][hit] == _check(records["vector"][hit])
                if hit.any():
                    yield order[at[hit]], np.array(records["vector"][hit])

    def append(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Add records for these vectors (later, if another process holds the cache's lock now)."""
        if len(keys):
            self._waiting.append(_records(self._record, keys, vectors))
        if not self._waiting:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with locked(self._lock, LOCK_TIMEOUT):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
                try:
                    self._append_locked(fd)
                finally:
                    os.close(fd)
            self._failing = False
        except (OSError, MemoryServerError) as problem:  # a full disk, a busy lock...: it is only a cache
            waiting = sum(len(r) for r in self._waiting)
            if waiting > MAX_WAITING:
                self._waiting.clear()
            self._said(f"Could not add to the vector cache {self.path} ({problem}); {waiting} vectors wait")

    def records(self) -> int:
        try:
            size = self.path.stat().st_size
        except OSError:
            return 0
        return max(size - HEADER, 0) // self._record.itemsize

    def should_prune(self, used: int) -> bool:
        return self.records() > used * PRUNE_AT + PRUNE_SLACK

    def rewrite(self, keys: np.ndarray, vectors: Iterable[np.ndarray]) -> None:
        """Replace the cache with records for these keys alone; `vectors` gives theirs, a chunk at a time."""

        def write(fd: int) -> None:
            write_all(fd, _header_bytes(self.header))
            done = 0
            for chunk in vectors:
                write_all(fd, _records(self._record, keys[done : done + len(chunk)], chunk).tobytes())
                done += len(chunk)

        try:
            with locked(self._lock, LOCK_TIMEOUT):
                remove_stale_temp_files(self.path)
                write_atomically(self.path, write)
            self._waiting.clear()
            self._failing = False
        except (OSError, MemoryServerError) as problem:
            self._said(f"Could not rewrite the vector cache {self.path}: {problem}")

    def _said(self, problem: str) -> None:
        """A failed write, as a warning the first time in a row (an unwritable cache folder would otherwise log
        one per batch of 48 texts, dozens a search), then at debug level."""
        logger.log(logging.DEBUG if self._failing else logging.WARNING, problem)
        self._failing = True

    def _fits(self, header: dict) -> bool:
        """Whether a cache with this header holds records of our model (the memory is in the file's name)."""
        return header["model"] == self.header["model"] and header["dim"] == self.header["dim"]

    def _append_locked(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        header = _header_bytes(self.header)
        fresh = size < HEADER
        if not fresh:
            try:
                fresh = not self._fits(_parse_header(os.pread(fd, HEADER, 0)))
            except ValueError:
                fresh = True
        if fresh:  # missing, torn or another layout: start again
            _sweep(self.path.parent)
            os.ftruncate(fd, 0)
            write_all(fd, header)
            size = HEADER
        torn = (size - HEADER) % self._record.itemsize
        if torn:  # a writer killed in the middle of a record: drop the piece
            os.ftruncate(fd, size - torn)
            size -= torn
        os.lseek(fd, size, os.SEEK_SET)
        for records in self._waiting:
            write_all(fd, records.tobytes())
        self._waiting.clear()


def _sweep(folder: Path) -> None:
    """Once per process and model: delete the caches of memory files gone for a month, and the single shared
    cache of earlier versions (one file per model beside the model folders, float16, never read now)."""
    if folder in _swept:
        return
    _swept.add(folder)
    for legacy in folder.parent.glob("*.npz"):
        with contextlib.suppress(OSError):
            legacy.unlink()
    now = time.time()
    for cache in folder.glob("*.vectors"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            memory = _read_header(cache)["memory"]
            if memory and not os.path.exists(memory) and now - cache.stat().st_mtime > ORPHAN_AGE:
                cache.unlink()


def _record(dim: int) -> np.dtype:
    return np.dtype([("key", "S16"), ("vector", "<f4", (dim,)), ("check", "<u4")])


def _records(dtype: np.dtype, keys: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    records = np.zeros(len(keys), dtype=dtype)
    records["key"] = keys
    records["vector"] = vectors
    records["check"] = _check(records["vector"])
    return records


def _prefixes(keys: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each key, as an integer."""
    return np.ascontiguousarray(keys).view(np.uint64)[::2]


def _check(vectors: np.ndarray) -> np.ndarray:
    """A checksum of each vector's bits: an integer sum, the same whatever the order it is added in."""
    bits = np.ascontiguousarray(vectors, dtype=np.float32).view(np.uint32)
    return (bits.sum(axis=1, dtype=np.uint64) * np.uint64(2654435761) >> np.uint64(16)).astype(np.uint32)


def _header_bytes(header: dict) -> bytes:
    text = MAGIC + json.dumps(header, ensure_ascii=True).encode() + b"\n"
    if len(text) > HEADER:  # a very long memory path: it is only shown, the file's name identifies the memory
        text = MAGIC + json.dumps(header | {"memory": ""}).encode() + b"\n"
    return text.ljust(HEADER, b" ")


def _parse_header(data: bytes) -> dict:
    if len(data) < HEADER or not data.startswith(MAGIC):
        raise ValueError("not a vector cache of this version")
    try:
        header = json.loads(data[len(MAGIC) :].split(b"\n", 1)[0])
    except ValueError as problem:
        raise ValueError(f"damaged header ({problem})") from problem
    if not isinstance(header, dict) or not {"model", "dim", "memory"} <= header.keys():
        raise ValueError("damaged header")
    return header


def _read_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        return _parse_header(handle.read(HEADER))
