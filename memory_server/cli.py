"""Command line: options and environment variables in, a running stdio server out.

Only this module prints, exits or configures logging, always on stderr: stdout carries the MCP protocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memory_server import __version__

logger = logging.getLogger("memory_server")

APP = "mcp-memory-contexts"
DESCRIPTION = """\
An MCP memory server: a knowledge graph (entities, relations, observations) kept in JSONL files,
compatible with @modelcontextprotocol/server-memory, with switchable memory contexts
(personal, work, one per project). Speaks MCP over stdio; logs go to stderr.

Every option can also be set with the environment variable named in brackets;
the option wins when both are given."""


def cli(*args: str) -> None:
    """Parse `args` (default: sys.argv), set up logging and contexts, and serve MCP over stdio until closed."""
    command = list(args or sys.argv[1:])
    if command[:1] in (["merge-driver"], ["install-merge-driver"]):  # the git merge driver, see merge.py
        sys.exit(_git_command(command))
    options = parse_options(args or None)
    logging.basicConfig(
        level=options.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # watchfiles logs every change it sees; with stderr sent to a file in a watched folder that would feed itself.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    _single_threaded_blas()
    # Imported here so that --help and --version answer at once, and after the BLAS setting above.
    import anyio

    from memory_server.contexts import ContextRegistry, Contexts
    from memory_server.embeddings import EmbedderSlot
    from memory_server.search import Searcher
    from memory_server.server import build_server, serve_stdio

    if options.memory_path is None:
        _migrate_legacy_file(_standard_memory_path())
    registry = ContextRegistry(options.contexts_directory, _standard_memory_path(), options.lock_timeout)
    contexts = Contexts(
        registry,
        memory_path=_absolute(options.memory_path) if options.memory_path else None,
        default_context=options.default_context,
        project_dir=options.project_dir,
        read_only=options.read_only,
        lock_timeout=options.lock_timeout,
    )
    for problem in registry.problems():
        logger.warning(problem)
    if options.default_context and options.default_context.lower() != contexts.active_name.lower():
        logger.warning("No context is named %r; starting in %r.", options.default_context, contexts.active_name)
    logger.info(
        "Memory server %s: contexts in %s, active context '%s'", __version__, registry.file, contexts.active_name
    )
    embeddings = EmbedderSlot(options.embedding_model, _cache_home() / APP / "vectors")
    server = build_server(
        contexts, Searcher(embeddings), context_admin=not options.no_context_admin, project_boost=options.project_boost
    )
    anyio.run(serve_stdio, server)


def _git_command(command: list[str]) -> int:
    """`merge-driver BASE OURS THEIRS`, which git runs, and `install-merge-driver [PATTERN ...]`."""
    from memory_server import merge

    name, rest = command[0], command[1:]
    parser = argparse.ArgumentParser(prog=f"{APP} {name}")
    if name == merge.MERGE_COMMAND:
        parser.description = "Three-way merge of memory files for git (%O %A %B); the result goes to OURS."
        for side in ("base", "ours", "theirs"):
            parser.add_argument(side, type=Path)
        options = parser.parse_args(rest)
        try:
            result = merge.merge_files(options.base, options.ours, options.theirs)
        except OSError as problem:
            print(f"{APP} {name}: {problem}; {options.ours} is left as it was", file=sys.stderr)
            return 2
        for conflict in result.conflicts:
            print(f"{APP} {name}: conflict in {options.ours}: {conflict}", file=sys.stderr)
        return 1 if result.conflicts else 0
    parser.description = "Set up the git repository of the current folder to merge memory files with merge-driver."
    parser.add_argument(
        "patterns",
        nargs="*",
        default=list(merge.DEFAULT_PATTERNS),
        metavar="PATTERN",
        help="files to merge this way, as .gitattributes patterns (default: .ai-memory.jsonl)",
    )
    parser.add_argument("--repository", type=Path, default=Path.cwd(), help="a folder of the repository")
    options = parser.parse_args(rest)
    try:
        steps = merge.install(options.repository, options.patterns)
    except merge.MergeSetupError as problem:
        print(f"{APP} {name}: {problem}", file=sys.stderr)
        return 2
    print("\n".join(steps))
    return 0


def _single_threaded_blas() -> None:
    """One BLAS thread: a search is one matrix-vector product, which extra threads only slow down (measured: 3x at
    100k vectors on 2 cores). Set before numpy loads; a user's own setting wins."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


def parse_options(args: Sequence[str] | None = None) -> argparse.Namespace:
    """Options from `args` (default: the command line), each defaulting to its environment variable."""
    return _parser().parse_args(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=APP, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    env = os.environ.get
    parser.add_argument(
        "--memory-path",
        type=Path,
        default=_path_or_none(env("MEMORY_FILE_PATH")),
        help="memory file of the 'default' context; relative paths are relative to the current folder "
        "[MEMORY_FILE_PATH] (default: $XDG_DATA_HOME/mcp-memory-contexts/memory.jsonl)",
    )
    parser.add_argument(
        "--contexts-directory",
        type=Path,
        default=_path_or_none(env("MEMORY_CONTEXTS_DIR")) or _config_home() / APP,
        help="folder of contexts.json, the context registry [MEMORY_CONTEXTS_DIR] "
        "(default: $XDG_CONFIG_HOME/mcp-memory-contexts)",
    )
    parser.add_argument(
        "--default-context",
        default=env("MEMORY_DEFAULT_CONTEXT") or None,
        help="context active at start [MEMORY_DEFAULT_CONTEXT] "
        "(default: activeContext of contexts.json, else 'default')",
    )
    parser.add_argument(
        "--project-dir",
        type=Path,
        default=_path_or_none(env("MEMORY_PROJECT_DIR")),
        help="folder to detect the project from for {projectDir} contexts [MEMORY_PROJECT_DIR] "
        "(default: the client's workspace root, else the current folder)",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        default=_flag(env("MEMORY_READ_ONLY")),
        help="refuse every change to every memory file [MEMORY_READ_ONLY=1]",
    )
    parser.add_argument(
        "--no-context-admin",
        action="store_true",
        default=_flag(env("MEMORY_NO_CONTEXT_ADMIN")),
        help="leave out the add_context and remove_context tools [MEMORY_NO_CONTEXT_ADMIN=1]",
    )
    parser.add_argument(
        "--lock-timeout",
        type=_positive_float,
        default=env("MEMORY_LOCK_TIMEOUT") or "10",  # a string default goes through `type`, errors included
        help="seconds to wait for another process's lock on a memory file [MEMORY_LOCK_TIMEOUT] (default: 10)",
    )
    parser.add_argument(
        "--embedding-model",
        default=env("MEMORY_EMBEDDING_MODEL") or None,
        help="model2vec model for semantic search: a folder or a hub id such as minishlab/potion-base-8M, or "
        "'none' for keyword ranking only [MEMORY_EMBEDDING_MODEL] (default: the bundled model)",
    )
    parser.add_argument(
        "--project-boost",
        type=float,
        default=env("MEMORY_PROJECT_BOOST") or "0.05",
        help="preference for the current project's relevant hits when searching every context: their scores grow "
        "by this share [MEMORY_PROJECT_BOOST] (default: 0.05)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        type=str.lower,
        default=(env("MEMORY_LOG_LEVEL") or "info").lower(),
        help="how much to log on stderr [MEMORY_LOG_LEVEL] (default: info)",
    )
    parser.add_argument("--version", action="version", version=f"{APP} {__version__}")
    return parser


def _standard_memory_path() -> Path:
    """memory.jsonl in the user data folder: the default context's file unless --memory-path says otherwise."""
    return _data_home() / APP / "memory.jsonl"


def _migrate_legacy_file(path: Path) -> None:
    """Like the official server (when no path is given): rename a legacy memory.json beside `path` to it."""
    legacy = path.with_name("memory.json")
    if legacy.is_file() and not path.exists():
        try:
            legacy.rename(path)
            logger.warning("Renamed the legacy memory file %s to %s (JSONL format, same content).", legacy, path)
        except OSError as problem:
            logger.warning("Could not rename the legacy memory file %s to %s: %s", legacy, path, problem)


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path.expanduser()))


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def _path_or_none(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be more than 0 seconds")
    return number
