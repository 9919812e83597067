"""File primitives shared by the memory store and the contexts registry: change stamps, the cross-process lock,
and the project's single atomic-write helper."""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import secrets
import stat
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import filelock

from memory_server.errors import LockTimeoutError, MemoryFileError
from memory_server.git import find_checkout

LOCKS_FOLDER = "mcp-memory-contexts"  # inside a repository's git folder


class Stamp(NamedTuple):
    """Identifies one state of a file cheaply: an atomic replace changes the inode (and the change time, should a
    file system hand the inode out again), an append the size and mtime."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamp_of(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as problem:
        raise MemoryFileError(path, "read", problem) from problem
    return Stamp.of(st)


def lock_path_for(path: Path) -> Path:
    """Where the cross-process lock of `path` lives; work it out at every acquisition.

    - In a git work tree: `<git common folder>/mcp-memory-contexts/<key>.lock`, so a lock never shows in
      `git status` and nothing is added to the user's repository configuration. The key names the file by its
      folder's device and inode and its name (case and Unicode form folded): every spelling of that folder (a
      symbolic link, another letter case on macOS or Windows) leads to one lock.
    - Elsewhere, or when that folder cannot be made (a read-only `.git`): beside the file, `<file>.lock`.

    The answer depends on the file system alone, never on environment variables, so two clients started with
    different settings still exclude each other; worked out again at each acquisition, a `git init` around a
    memory file moves the lock for every process at once. Creates the memory file's folder, whose identity the
    key needs.
    """
    beside = legacy_lock_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.stat(path.parent)
    except OSError:
        return beside
    checkout = find_checkout(path.parent)
    if checkout is None:
        return beside
    locks = checkout.common_dir / LOCKS_FOLDER
    try:
        locks.mkdir(exist_ok=True)
    except OSError:
        return beside
    if not locks.is_dir():
        return beside
    name = unicodedata.normalize("NFC", path.name).casefold()
    identity = f"{folder.st_dev}:{folder.st_ino}:{name}".encode("utf-8", "surrogateescape")
    return locks / f"{hashlib.sha256(identity).hexdigest()[:32]}.lock"


def legacy_lock_path(path: Path) -> Path:
    """The lock beside the file: where it lives outside git, and where earlier versions always kept it."""
    return path.with_name(path.name + ".lock")


def remove_legacy_lock(path: Path, lock_path: Path) -> None:
    """Delete a `<file>.lock` left beside `path` by an earlier version, once the lock lives elsewhere and no
    process holds the old one, so it stops showing in `git status`."""
    legacy = legacy_lock_path(path)
    if lock_path == legacy or not legacy.is_file():
        return
    old = filelock.FileLock(legacy, thread_local=False)
    with contextlib.suppress(filelock.Timeout, OSError):
        old.acquire(timeout=0)
        try:
            legacy.unlink()
        finally:
            old.release()


@contextlib.contextmanager
def locked(lock: filelock.BaseFileLock, timeout: float) -> Iterator[None]:
    """Hold `lock`, turning filelock's failures into errors that name the file and the way out."""
    lock_path = Path(lock.lock_file)
    try:
        lock.acquire(timeout=timeout)
    except filelock.Timeout:
        raise LockTimeoutError(lock_path, timeout) from None
    except OSError as problem:
        raise MemoryFileError(lock_path, "lock", problem) from problem
    try:
        yield
    finally:
        lock.release()


def write_atomically(path: Path, data: bytes | Callable[[int], None]) -> None:
    """Replace `path` with `data` (bytes, or a function writing to the file descriptor it is given) so that
    readers and crashes only ever see the old or the new content.

    The temporary file sits in the same folder (a rename cannot cross file systems), is fsynced before the
    rename, keeps the permissions of the file it replaces, and is removed if anything fails.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{temp_prefix(path)}{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        if callable(data):
            data(fd)
        else:
            write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(path.parent)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a short write is followed by one that reports the real error (disk full...)
        view = view[os.write(fd, view) :]


def copy_range(source: int, target: int, start: int, end: int) -> None:
    """Append bytes [start, end) of file `source` to file `target`, inside the kernel where it can."""
    while start < end:
        try:
            done = os.copy_file_range(source, target, end - start, start)
        except (AttributeError, OSError) as problem:  # not on this system or file system: copy by hand
            if isinstance(problem, OSError) and problem.errno not in _NO_COPY_FILE_RANGE:
                raise
            chunk = os.pread(source, min(end - start, 1 << 20), start)
            write_all(target, chunk)
            done = len(chunk)
        if done == 0:
            raise OSError(errno.EIO, "the file got shorter while it was being copied")
        start += done


_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}


def temp_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_stale_temp_files(path: Path) -> None:
    """Delete temporary files a killed writer left beside `path`. Call only while holding the file's lock."""
    with contextlib.suppress(OSError):
        for leftover in path.parent.glob(glob.escape(temp_prefix(path)) + "*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _fsync_directory(folder: Path) -> None:
    # Makes the rename itself durable; some file systems refuse to open or sync a folder, which is harmless.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
