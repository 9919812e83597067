"""Where a command's output goes: a file named by `--out`, or standard output.

An `--out` file is never a memory: a path that leads (through links, `..` or a hard link) to the memory file of a
context in the registry, to a file a project context's template names, or to the registry itself is refused. A
character device or a named pipe (`/dev/stdout`, `/dev/null`, a FIFO another program reads) is written in place,
as a shell's `>` would; it is never replaced by a regular file. A regular file is replaced atomically, through
its links. Every failure is one sentence, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from memory_server.contexts import Contexts
from memory_server.errors import MemoryServerError
from memory_server.files import kind_of, write_all, write_atomically
from memory_server.templates import TEMPLATE_VARIABLES

_FOLDER_VARIABLES = ("{projectDir}", "<projectDir>", "{repoRoot}")  # stand for whole paths; the others for a name
_VARIABLE = re.compile("(" + "|".join(re.escape(v) for v in TEMPLATE_VARIABLES) + ")")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class OutputError(MemoryServerError):
    """Output that cannot, or must not, be written; the text says why and what to do instead."""


def write_output(target: Path, data: bytes, contexts: Contexts) -> None:
    """Write `data` to the file `target` names (see the module's text for the rules)."""
    target = Path(os.path.abspath(target))
    refuse_memory(target, contexts)
    try:  # through links, /proc's too: /dev/stdout may be a pipe, which has no path of its own
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as problem:
        raise OutputError(f"Cannot write {target}: {_why(problem)}. Nothing was written.") from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise OutputError(
            f"--out {target} is {kind_of(st.st_mode)}; it takes a file, a named pipe or a character device. "
            "Nothing was written."
        )
    try:
        if st is None or stat.S_ISREG(st.st_mode):
            write_atomically(Path(os.path.realpath(target)), data)  # a link stays a link
        else:
            _write_in_place(target, data)
    except BrokenPipeError:
        raise  # the reader of a pipe stopped reading: like `>` into it, end quietly
    except OSError as problem:
        left = "Nothing was written" if st is None or stat.S_ISREG(st.st_mode) else "The output is incomplete"
        raise OutputError(f"Cannot write {target}: {_why(problem)}. {left}.") from None


def refuse_memory(target: Path, contexts: Contexts) -> None:
    """Raise OutputError if writing `target` would replace a memory file or the contexts registry."""
    real = Path(os.path.realpath(target))
    for path, owner in _memory_files(contexts):
        if real == Path(os.path.realpath(path)) or _same_file(real, path):
            raise OutputError(
                f"--out {target} is {owner} ({path}); writing there would destroy it. "
                "Choose another file. Nothing was written."
            )
    for config in contexts.registry.contexts():
        if config.project_based and _template_names(config.path, target, contexts.registry.directory):
            raise OutputError(
                f"--out {target} is a memory file of context '{config.name}' (path {config.path}); writing there "
                "would destroy it. Choose another file. Nothing was written."
            )


class StdoutError(OutputError):
    """Standard output failed (a full disk, a closed terminal); what was printed before is incomplete."""

    def __init__(self, problem: OSError) -> None:
        super().__init__(f"Cannot write to standard output: {_why(problem)}. The output is incomplete.")


def write_stdout(stream: TextIO, text: str) -> None:
    """Write to standard output; a broken pipe goes on up (its reader has what it wanted), any other failure
    becomes a StdoutError. A real stream is written to its file descriptor, to the last byte: Python's buffered
    writer reports a short write (a disk filling up) as success and drops the rest."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file (a test's StringIO)
        fd = None
    try:
        stream.flush()  # what was printed before
        if fd is None:
            stream.write(text)
        elif text:
            write_all(fd, text.encode(stream.encoding or "utf-8", "backslashreplace"))
    except BrokenPipeError:
        raise
    except OSError as problem:
        raise StdoutError(problem) from None


def silence(stream: TextIO) -> None:
    """Send what is still buffered for `stream` nowhere: its reader is gone or its disk is full, and the flush at
    exit must not fail again with a traceback."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _memory_files(contexts: Contexts) -> Iterator[tuple[Path, str]]:
    yield contexts.registry.file, "the contexts registry"
    for config in contexts.registry.contexts():
        owner = f"the memory file of context '{config.name}'"
        if not config.project_based:
            yield contexts.static_path(config.path), owner
        with contextlib.suppress(MemoryServerError, OSError):  # a project context with no project here
            yield contexts.resolve_config(config).path, owner


def _template_names(template: str, target: Path, relative_to: Path) -> bool:
    """Whether `target` is a file that `template` names for some project: `{projectDir}` and `{repoRoot}` stand
    for any folder, `{projectName}` and `{projectId}` for any name."""
    pieces = _VARIABLE.split(os.path.expanduser(template))
    if not (os.path.isabs(pieces[0]) or pieces[0] == "" and pieces[1] in _FOLDER_VARIABLES):
        pieces[0] = os.path.join(relative_to, pieces[0])
    spellings = {pieces[0]}
    head, slash, _ = pieces[0].rpartition("/")
    if slash:  # the fixed folder the template starts with, as its real path (a memory folder may be a link)
        spellings.add(os.path.join(os.path.realpath(head or "/"), pieces[0][len(head) + 1 :]))
    names = {str(target), os.path.realpath(target)}
    for first in spellings:
        regex = "".join(_piece(p) for p in [first, *pieces[1:]])
        if any(re.fullmatch(regex, name) for name in names):
            return True
    return False


def _piece(piece: str) -> str:
    if piece in _FOLDER_VARIABLES:
        return "/.+"
    if piece in TEMPLATE_VARIABLES:
        return "[^/]+"
    return re.escape(piece)


def _write_in_place(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | _CLOEXEC)  # a pipe waits here for its reader, as with a shell's `>`
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by a regular file since it was looked at
            raise OutputError(f"--out {path} was replaced by a regular file while it was opened; try again.")
        write_all(fd, data)
    finally:
        os.close(fd)


def _same_file(real: Path, path: Path) -> bool:
    """Another name for the same file: a hard link, or a folder mounted twice."""
    try:
        return os.path.samefile(real, path)
    except OSError:
        return False


def _why(problem: OSError) -> str:
    return problem.strerror or str(problem)
