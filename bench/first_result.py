"""Spawn → first tool result, ours against the official server, in turns (issue 14's start-up).

Each run spawns a server on a copy of a graph of --entities entities (bench/vs_upstream.py's, 5 observations
each) and, through the MCP Python SDK client as a client does: initialize, tools/list, one tool call. Times are
from spawn to each answer. The servers take turns run by run (ours, the official one, and --before's checkout if
given), so that the machine's changing load falls on all of them alike.

    .venv/bin/python bench/first_result.py                          # open_nodes, read_graph, search_nodes
    .venv/bin/python bench/first_result.py --runs 15 --calls open_nodes
    .venv/bin/python bench/first_result.py --before /tmp/main-export  # another checkout's memory_server beside

search_nodes is our keyword mode (the official server's substring search); the first hybrid search waits for the
embedding model and the memory's vectors, which bench/first_search.py measures.

memory_server is compiled to bytecode first (compileall), as an installed copy is, or once it has run: with
PYTHONDONTWRITEBYTECODE set (as on the development machines) an editable checkout would otherwise be compiled again
at every start. --no-compile measures that case.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import SHARED_HOME, copy_of, graph_file, load, official, ours, started  # noqa: E402
from vs_upstream import UPSTREAM_VERSION, ServerSpec, ensure_upstream, person_name  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CALLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "open_nodes": lambda label: {"names": [person_name(7)]},
    "read_graph": lambda label: {},
    "search_nodes": lambda label: {"query": "espresso", **({"mode": "keyword"} if label != "official" else {})},
}


async def one_start(spec: ServerSpec, tool: str, arguments: dict[str, Any], timeout: float) -> tuple[float, ...]:
    """ms from spawn to the answers to initialize, tools/list and the tool call."""
    begin = time.perf_counter()
    async with started(spec, timeout) as server:
        initialized = time.perf_counter()
        await server.session.list_tools()
        listed = time.perf_counter()
        with anyio.fail_after(timeout):
            result = await server.session.call_tool(tool, arguments)
        answered = time.perf_counter()
    if result.is_error:
        raise RuntimeError(f"{spec.label}: {tool} failed: {result.content}")
    return tuple((moment - begin) * 1000 for moment in (initialized, listed, answered))


async def main_async(args: argparse.Namespace) -> None:
    entry = None if args.no_official else ensure_upstream(args.upstream_dir, args.timeout * 3)
    with tempfile.TemporaryDirectory(prefix="first-result-") as folder:
        work = Path(folder)
        SHARED_HOME[0] = work / "shared-home"
        master = graph_file(work, args.entities)
        makers: dict[str, Callable[[], ServerSpec]] = {"ours": lambda: ours(copy_of(master, work, "ours"), None)}
        if args.before is not None:
            makers["before"] = lambda: ours(copy_of(master, work, "before"), args.before)
        if entry is not None:
            makers["official"] = lambda: official(entry, copy_of(master, work, "official"))
        if args.compile:
            for code in (REPO, args.before):
                if code is not None:
                    compileall.compile_dir(code / "memory_server", quiet=1)
        print(
            f"# bench/first_result.py: {args.entities:,} entities ({master.stat().st_size / 1e6:.1f} MB), "
            f"{args.runs} runs per server and call, in turns; official {UPSTREAM_VERSION}; bytecode "
            f"{'compiled' if args.compile else 'not compiled'}; load {load()}\n"
        )
        print("| first call | server | initialize ms | tools/list ms | first tool result ms | result range ms |")
        print("|---|---|---:|---:|---:|---:|")
        for tool in args.calls:
            times: dict[str, list[tuple[float, ...]]] = {label: [] for label in makers}
            for run in range(args.runs):
                order = list(makers)
                order = order[run % len(order) :] + order[: run % len(order)]
                for label in order:
                    spec = makers[label]()
                    times[label].append(await one_start(spec, tool, CALLS[tool](label), args.timeout))
            for label, runs in times.items():
                medians = [statistics.median(run[k] for run in runs) for k in range(3)]
                low, high = min(run[2] for run in runs), max(run[2] for run in runs)
                print(
                    f"| {tool} | {label} | {medians[0]:.0f} | {medians[1]:.0f} | **{medians[2]:.0f}** "
                    f"| {low:.0f} to {high:.0f} |",
                    flush=True,
                )
        print(f"\nMedians; ms from spawn. Load at the end {load()}.")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="starts per server and call (default 9)")
    parser.add_argument("--entities", type=int, default=10_000, help="entities in the memory (default 10,000)")
    parser.add_argument("--calls", default=",".join(CALLS), help=f"first calls, comma-separated: {', '.join(CALLS)}")
    parser.add_argument("--before", type=Path, help="another checkout whose memory_server runs beside (PYTHONPATH)")
    parser.add_argument("--no-official", action="store_true", help="leave the official server out")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="leave memory_server uncompiled")
    upstream = Path(tempfile.gettempdir()) / f"mcp-server-memory-{UPSTREAM_VERSION}"
    parser.add_argument("--upstream-dir", type=Path, default=upstream, help="npm prefix of the official server")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for start-up and the call")
    args = parser.parse_args()
    args.calls = [call.strip() for call in args.calls.split(",") if call.strip()]
    if set(args.calls) - set(CALLS):
        parser.error(f"unknown call(s); choose from {', '.join(CALLS)}")
    if args.before is not None:
        args.before = args.before.resolve()
    return args


if __name__ == "__main__":
    anyio.run(main_async, parse_args())
