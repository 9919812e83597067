"""File primitives shared by the memory store and the contexts registry: change stamps, the cross-process lock,
the project's single atomic-write helper, and the checked append.

Other programs (git, editors, sync clients) never take our lock, so a write cannot rely on it alone: the atomic
write can compare-and-swap (on Linux it exchanges the new file with the old one and checks what it took out), and
the append checks the open file before writing and its own bytes after. Either raises `FileChangedError` when the
file is not the one that was read, and the caller reads it again.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import hashlib
import os
import secrets
import stat
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import filelock

from memory_server.errors import LockTimeoutError, LockUnavailableError, MemoryFileError
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

    def same_content(self, st: os.stat_result) -> bool:
        """True if `st` is this file with no write since (a rename moves the change time, not the content)."""
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == self[:4]

    def exactly(self, st: os.stat_result) -> bool:
        """True if `st` is this very state, change time included: before we write, a program that rewrote the file
        in place and then set its mtime back is still seen (its write moved the change time)."""
        return Stamp.of(st) == self


class FileChangedError(Exception):
    """Internal: the file changed between our read and our write; read it again and re-apply the change.
    `landed` says whether our bytes may have reached the file before the change was noticed."""

    def __init__(self, landed: bool = False) -> None:
        super().__init__("the file changed while it was being written")
        self.landed = landed


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
def locked(lock: filelock.BaseFileLock, timeout: float, shown_timeout: float | None = None) -> Iterator[None]:
    """Hold `lock`, turning filelock's failures into errors that name the file and the way out.

    The lock file is never followed through a symbolic link: filelock >= 3.20.1 opens it with O_NOFOLLOW, and we
    refuse a link (or a special file) ourselves first, whatever filelock version is installed.
    """
    lock_path = Path(lock.lock_file)
    check_lock_file(lock_path)
    try:
        lock.acquire(timeout=max(timeout, 0))
    except filelock.Timeout:
        raise LockTimeoutError(lock_path, timeout if shown_timeout is None else shown_timeout) from None
    except OSError as problem:
        check_lock_file(lock_path)  # swapped for a link while we waited: say so
        if problem.errno in _NO_PERMISSION:
            reason = problem.strerror.lower() if problem.strerror else str(problem)
            if os.path.lexists(lock_path):
                fix = f"The lock file is not writable for this user (left by a run with sudo?): sudo rm {lock_path}"
            else:
                fix = f"Its folder {lock_path.parent} is not writable for this user: make it writable"
            raise LockUnavailableError(lock_path, reason, fix + ", or point the server at another file.") from problem
        raise MemoryFileError(lock_path, "lock", problem) from problem
    try:
        yield
    finally:
        lock.release()


def check_lock_file(lock_path: Path) -> None:
    try:
        st = os.lstat(lock_path)
    except FileNotFoundError:
        return
    except OSError as problem:
        if problem.errno in _NO_PERMISSION:
            raise LockUnavailableError(lock_path, "its folder cannot be read", "Fix the folder's permissions.") from None
        raise MemoryFileError(lock_path, "lock", problem) from problem
    if stat.S_ISLNK(st.st_mode):
        raise LockUnavailableError(
            lock_path,
            f"it is a symbolic link (to {os.readlink(lock_path)}), and a lock file is never followed through a link",
            f"Delete the link ({lock_path}); the server makes a new lock file.",
        )
    if not stat.S_ISREG(st.st_mode):
        raise LockUnavailableError(
            lock_path, f"it is {kind_of(st.st_mode)}, not a regular file", f"Delete {lock_path}; the server makes a new one."
        )


_NO_PERMISSION = {errno.EACCES, errno.EPERM, errno.EROFS}
# Open flags that not every system has: never through a link, never blocking on a pipe, never inherited.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# ---- who wrote last ---------------------------------------------------------------------------------------------
# After each write, the writer records the file's new stamp on the lock file (an extended attribute: the lock's
# content is filelock's). The next server that finds the file in that state knows one of us wrote it, completely,
# under the lock; any other state was made by another program, which may still be writing it.

_MARK = "user.memory-contexts.stamp"


def read_mark(lock_path: Path) -> Stamp | None:
    try:
        return Stamp(*(int(part) for part in os.getxattr(lock_path, _MARK, follow_symlinks=False).split()))
    except (AttributeError, OSError, ValueError, TypeError):  # no extended attributes here: every change is foreign
        return None


def write_mark(lock_path: Path, stamp: Stamp) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.setxattr(lock_path, _MARK, " ".join(map(str, stamp)).encode(), follow_symlinks=False)


# ---- reading ------------------------------------------------------------------------------------------------------


def read_regular(path: Path) -> tuple[bytes, Stamp]:
    """The content of the regular file `path` (never a link, pipe or device), read up to the size it had when
    opened. Raises FileChangedError if the file changed during the read, FileNotFoundError if it is gone."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOFOLLOW | _CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileChangedError()  # it was a regular file when its path was checked: check again
        chunks, remaining = [], st.st_size
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 26))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining or not Stamp.of(st).same_content(os.fstat(fd)):
            raise FileChangedError()
        return b"".join(chunks), Stamp.of(st)
    finally:
        os.close(fd)


def read_ranges(path: Path, ranges: Sequence[tuple[int, int]], expected: Stamp) -> list[bytes]:
    """Bytes [start, end) of the regular file `path` for each of `ranges`, read only while it is in the `expected`
    state: FileChangedError if it is not (or changes meanwhile), FileNotFoundError if it is gone."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOFOLLOW | _CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or Stamp.of(st) != expected:
            raise FileChangedError()
        chunks = [os.pread(fd, end - start, start) for start, end in ranges]
        if any(len(chunk) != end - start for chunk, (start, end) in zip(chunks, ranges)):
            raise FileChangedError()
        if Stamp.of(os.fstat(fd)) != expected:
            raise FileChangedError()
        return chunks
    finally:
        os.close(fd)


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


_KINDS = [
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISREG, "a regular file"),
]


# ---- writing ------------------------------------------------------------------------------------------------------

ANYTHING = object()  # write_atomically(expected=ANYTHING): replace whatever is there


def write_atomically(
    path: Path, data: bytes | Callable[[int], None], expected: Stamp | None | object = ANYTHING
) -> Stamp:
    """Replace `path` with `data` (bytes, or a function writing to the file descriptor it is given) so that
    readers and crashes only ever see the old or the new content; return the new file's stamp.

    The temporary file sits in the same folder (a rename cannot cross file systems), is fsynced before the
    rename, keeps the permissions of the file it replaces, and is removed if anything fails. With `expected` (the
    stamp of the file that was read, or None for "no file"), the replace only happens if the file is still in that
    state, else FileChangedError: on Linux the check and the replace are one step (renameat2), elsewhere the check
    comes just before the rename.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{temp_prefix(path)}{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        if callable(data):
            data(fd)
        else:
            write_all(fd, data)
        os.fsync(fd)
        written = os.fstat(fd)
        _install(temp, path, expected, written.st_ino)
        stamp = Stamp.of(os.fstat(fd))  # after the rename, which moved the change time
    except BaseException:
        with contextlib.suppress(OSError):
            if os.lstat(temp).st_ino == os.fstat(fd).st_ino:
                os.unlink(temp)
        raise
    finally:
        os.close(fd)
    _fsync_directory(path.parent)
    if expected is not ANYTHING and stamp.size != written.st_size:
        raise FileChangedError(landed=True)  # another program wrote to it the moment it was in place: read again
    return stamp


def _install(temp: Path, path: Path, expected: Stamp | None | object, ours: int) -> None:
    if expected is ANYTHING:
        os.replace(temp, path)
    elif expected is None:
        try:
            if _rename2(temp, path, _RENAME_NOREPLACE):
                return
        except FileExistsError:
            raise FileChangedError() from None
        if os.path.lexists(path):
            raise FileChangedError()
        os.replace(temp, path)
    else:
        assert isinstance(expected, Stamp)
        try:  # most changes are seen here, before anything moves; the exchange catches the rest
            if not expected.exactly(os.stat(path)):
                raise FileChangedError()
            exchanged = _rename2(temp, path, _RENAME_EXCHANGE)
        except FileNotFoundError:
            raise FileChangedError() from None
        if not exchanged:
            os.replace(temp, path)
            return
        if expected.same_content(os.lstat(temp)):
            os.unlink(temp)  # the old file, now under the temporary name
            return
        _put_back(temp, path, ours)
        raise FileChangedError()


def _put_back(temp: Path, path: Path, ours: int) -> None:
    """Undo an exchange that took out a file another program had changed: that file goes back to `path` (a program
    writing it in place keeps writing the right file) and our new file is deleted."""
    _rename2(temp, path, _RENAME_EXCHANGE)
    if os.lstat(temp).st_ino != ours:  # yet another program replaced `path` meanwhile: its file goes back there
        _rename2(temp, path, _RENAME_EXCHANGE)
    os.unlink(temp)


def append_checked(path: Path, payload: bytes, expected: Stamp) -> Stamp:
    """Append `payload` to `path` if it is still in the `expected` state; return its new stamp.

    Checked on the open file just before the write, and after it: our bytes are where we put them and `path`
    still names this file (a program that replaced it by rename after our check would otherwise get them lost).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except (FileNotFoundError, IsADirectoryError):
        raise FileChangedError() from None
    except OSError as problem:
        if problem.errno in (errno.ELOOP, errno.ENXIO):  # became a link or a pipe since we looked
            raise FileChangedError() from None
        raise
    try:
        before = os.fstat(fd)
        if not (stat.S_ISREG(before.st_mode) and expected.exactly(before)):
            raise FileChangedError()
        try:
            write_all(fd, payload)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before.st_size)  # leave the file exactly as it was
            raise
        after = os.fstat(fd)
        grown = after.st_size == before.st_size + len(payload)  # else someone appended too: our stamp would hide it
        if not grown or os.pread(fd, len(payload), before.st_size) != payload or not _same_file(after, path):
            raise FileChangedError(landed=True)
        return Stamp.of(after)
    finally:
        os.close(fd)


def _same_file(st: os.stat_result, path: Path) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


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
            raise FileChangedError()  # the file got shorter while it was being copied
        start += done


_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}


def temp_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_stale_temp_files(path: Path) -> None:
    """Delete temporary files a killed writer left beside `path`. Call only while holding the file's lock."""
    with contextlib.suppress(OSError):
        for leftover in stale_temp_files(path):
            with contextlib.suppress(OSError):
                leftover.unlink()


def stale_temp_files(path: Path) -> list[Path]:
    """Temporary files of ours beside `path`: a writer's at work, or a killed writer's left over."""
    try:
        return list(path.parent.glob(glob.escape(temp_prefix(path)) + "*.tmp"))
    except OSError:
        return []


def _fsync_directory(folder: Path) -> None:
    # Makes the rename itself durable; some file systems refuse to open or sync a folder, which is harmless.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---- renameat2 --------------------------------------------------------------------------------------------------
# The standard library has no renameat2 (Linux 3.15+, glibc 2.28+); it is one call, so ctypes rather than a package.

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _load_renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


_RENAMEAT2 = _load_renameat2()


def _rename2(source: Path, target: Path, flags: int) -> bool:
    """renameat2(source, target, flags); False where this system or file system does not have it."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))
