"""How the server holds up as memory grows (issue 14): search after a write, idle servers, memory, start-up, point
writes; the official `@modelcontextprotocol/server-memory` beside ours where it has the operation.

    .venv/bin/python bench/scale.py                                  # everything, at 10k, 50k and 200k observations
    .venv/bin/python bench/scale.py --only search                    # one part (search, idle, rss, start, writes)
    .venv/bin/python bench/scale.py --only search,idle --sizes 200000
    .venv/bin/python bench/scale.py --code /tmp/main-checkout        # another checkout's memory_server, to compare

Graphs are `bench/vs_upstream.py`'s (5 observations and 1 relation per entity, so 10k observations are 2,000
entities); every server is a real stdio process driven by the MCP Python SDK client, ours as `python -m
memory_server`, the official one as vs_upstream installs it (npm, pinned version). The parts:

- search: our default (hybrid) search_nodes, median of --repeat calls with no write in between, then each right
  after a one-observation add_observations by the same server, by another server on the same file (a rewrite),
  and after another server's create_entities (an append). The first search (which embeds the memory) is shown too;
  the official server's substring search before and after its own write stands beside.
- idle: a writer and two idle servers on one file (each idle one has searched once, so it holds an index, and
  opened a node). The writer makes --writes one-observation writes, 0.2 s apart; CPU-seconds (user + system, from
  /proc) of each process from the first write until none has used CPU for 2 s, per write. Then the first search on
  an idle server (where deferred work is paid). Once with our server as the writer, once with the official one.
- rss: resident memory (VmRSS, and the peak VmHWM) of a server with an empty memory after its first search while
  a large memory's vector cache exists; of a server on 10k entities after the official tools (and after one of our
  searches); of a server that touched 40 project memories of about 2 MB each (open_nodes, then add_observations).
- start: spawn to the answer of `initialize`, and spawn to the first tool result (tools/list, then open_nodes on
  10k entities), medians of --starts runs; and `python -X importtime -m memory_server --version`.
- writes: point operations at each size, medians of --repeat calls after one warm-up call; and, for scale, what
  one full atomic rewrite of a file of that size costs on this disk (copy, fsync, rename, fsync of the folder).

The machine is shared: the load average is printed with every part; read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_upstream import (  # noqa: E402 - the official server as vs_upstream installs and drives it
    CITIES,
    UPSTREAM_VERSION,
    ServerSpec,
    ensure_upstream,
    find_pid,
    fmt_ms,
    ours_spec,
    partner_of,
    person_name,
    ratio,
    timed_call,
    upstream_spec,
    write_graph,
)

PARTS = ("search", "idle", "rss", "start", "writes")
SHARED_HOME: list[Path | None] = [None]  # set by main: where our servers keep their registry, data and vectors
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


# ---- servers ----------------------------------------------------------------------------------------------------


@dataclass
class Running:
    session: ClientSession
    pid: int | None
    spec: ServerSpec


def tagged(spec: ServerSpec, code: Path | None) -> ServerSpec:
    """The spec with a marker of its own (several servers share one file) and, for ours, the checkout to run."""
    marker = f"scale-bench-{uuid.uuid4().hex}"
    env = {**spec.env, "SCALE_BENCH_ID": marker}
    if code is not None and spec.label == "ours":
        env["PYTHONPATH"] = str(code)
    return replace(spec, env=env, marker=marker)


@contextlib.asynccontextmanager
async def started(spec: ServerSpec, timeout: float) -> AsyncIterator[Running]:
    params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env, cwd=tempfile.gettempdir())
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=timeout) as session,
        ):
            with anyio.fail_after(timeout):
                await session.initialize()
            yield Running(session, find_pid(spec.marker), spec)


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK  # utime, stime


def memory_mib(pid: int | None, field: str = "VmRSS") -> float | None:
    if pid is None:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


async def call(running: Running, tool: str, arguments: dict[str, Any], timeout: float) -> float:
    return await timed_call(running.session, tool, arguments, timeout)


# ---- the workload ---------------------------------------------------------------------------------------------


def entities_for(observations: int) -> int:
    return max(observations // 5, 1)


def graph_file(work: Path, entities: int) -> Path:
    path = work / f"graph-{entities}.jsonl"
    if not path.exists():
        write_graph(path, entities)
    return path


def copy_of(master: Path, work: Path, label: str) -> Path:
    folder = work / f"{label}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    target = folder / "memory.jsonl"
    if master.exists():
        shutil.copyfile(master, target)
    return target


def ours(memory: Path, code: Path | None, home: Path | None = None, **env: str) -> ServerSpec:
    """Our server on `memory`; its registry, data and vector cache in `home` (default: one folder for the whole
    run, so a memory is embedded once however many servers search it)."""
    spec = ours_spec(memory)
    home = home or SHARED_HOME[0]
    if home is not None:
        spec.env.update(
            MEMORY_CONTEXTS_DIR=str(home / "contexts-config"),
            XDG_DATA_HOME=str(home / "xdg-data"),
            XDG_CACHE_HOME=str(home / "xdg-cache"),
        )
    spec.env["MEMORY_MAX_RESULT_TOKENS"] = "20000"  # the default: results as a client gets them
    spec.env.update(env)
    return tagged(spec, code)


def official(entry: Path, memory: Path) -> ServerSpec:
    return tagged(upstream_spec(entry, memory), None)


QUERIES = [
    "who lives in Lisbon and drinks espresso",
    "someone learning the cello",
    "product managers at Globex",
    "weekend sailing",
    "speaks Japanese",
    "quarterly roadmap reports",
    "sourdough baking on weekends",
    "a nurse in Berlin",
    "trail running and chai",
    "works at Initech as a lawyer",
]


def query(k: int) -> dict[str, Any]:
    return {"query": f"{QUERIES[k % len(QUERIES)]} {k}" if k >= len(QUERIES) else QUERIES[k]}


def addition(n: int, k: int, tag: str) -> dict[str, Any]:
    name = person_name((k * 7919 + len(tag)) % n)
    return {"observations": [{"entityName": name, "contents": [f"{tag}: visited {CITIES[k % len(CITIES)]} (#{k})"]}]}


def newcomer(k: int, tag: str) -> dict[str, Any]:
    return {"entities": [{"name": f"{tag} newcomer #{k}", "entityType": "person", "observations": ["joined today"]}]}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# ---- search before and after a write --------------------------------------------------------------------------


async def part_search(args: argparse.Namespace, work: Path, entry: Path | None) -> None:
    print(f"## Search before and after a write (load {load()})\n")
    rows = [
        "| observations | first search | no write | after own add_observations | after another server's "
        "add_observations | after another server's create_entities | official: no write | official: after write |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in args.sizes:
        n = entities_for(size)
        memory = copy_of(graph_file(work, n), work, "search")
        figures: dict[str, list[float]] = {key: [] for key in ("none", "own", "other", "append")}
        async with (
            started(ours(memory, args.code), args.timeout) as me,
            started(ours(memory, args.code), args.timeout) as other,
        ):
            first = await call(me, "search_nodes", query(0), args.timeout)
            await call(other, "open_nodes", {"names": [person_name(0)]}, args.timeout)
            for k in range(1, args.repeat + 1):
                figures["none"].append(await call(me, "search_nodes", query(k), args.timeout))
            for k in range(1, args.repeat + 1):
                await call(me, "add_observations", addition(n, k, "own"), args.timeout)
                figures["own"].append(await call(me, "search_nodes", query(k), args.timeout))
            for k in range(1, args.repeat + 1):
                await call(other, "add_observations", addition(n, k, "other"), args.timeout)
                figures["other"].append(await call(me, "search_nodes", query(k), args.timeout))
            for k in range(1, args.repeat + 1):
                await call(other, "create_entities", newcomer(k, "other"), args.timeout)
                figures["append"].append(await call(me, "search_nodes", query(k), args.timeout))
        up_none, up_after = await official_search(args, work, entry, n) if entry else (None, None)
        base = median(figures["none"])
        cells = [fmt_ms(first), fmt_ms(base)]
        for key in ("own", "other", "append"):
            after = median(figures[key])
            cells.append(f"{fmt_ms(after)} ({after / base:.1f}×)" if after and base else fmt_ms(after))
        rows.append(f"| {size:,} | " + " | ".join([*cells, fmt_ms(up_none), fmt_ms(up_after)]) + " |")
    print("\n".join(rows))
    print(
        f"\nms, medians of {args.repeat} searches (our default hybrid search, limit 10); (×): against no write. "
        "The official server has only its substring search, shown for scale.\n",
        flush=True,
    )


async def official_search(
    args: argparse.Namespace, work: Path, entry: Path, n: int
) -> tuple[float | None, float | None]:
    memory = copy_of(graph_file(work, n), work, "official-search")
    before, after = [], []
    async with started(official(entry, memory), args.timeout) as up:
        await call(up, "search_nodes", {"query": person_name(1)}, args.timeout)
        for k in range(1, args.repeat + 1):
            before.append(await call(up, "search_nodes", {"query": person_name(k * 3)}, args.timeout))
        for k in range(1, args.repeat + 1):
            await call(up, "add_observations", addition(n, k, "up"), args.timeout)
            after.append(await call(up, "search_nodes", {"query": person_name(k * 3)}, args.timeout))
    return median(before), median(after)


# ---- idle servers ---------------------------------------------------------------------------------------------


async def part_idle(args: argparse.Namespace, work: Path, entry: Path | None) -> None:
    print(f"## Idle servers and another process's small writes (load {load()})\n")
    rows = [
        "| observations | writer | writer CPU-s per write | each idle server's CPU-s per write (mean) | idle/writer "
        "| idle server's next search |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for size in args.sizes:
        n = entities_for(size)
        writers = [("ours", None)] + ([("official", entry)] if entry else [])
        for label, official_entry in writers:
            memory = copy_of(graph_file(work, n), work, "idle")
            writer_spec = official(official_entry, memory) if official_entry else ours(memory, args.code)
            async with contextlib.AsyncExitStack() as stack:
                idle = [
                    await stack.enter_async_context(started(ours(memory, args.code), args.timeout)) for _ in range(2)
                ]
                for server in idle:
                    await call(server, "search_nodes", query(0), args.timeout)
                    await call(server, "open_nodes", {"names": [person_name(1)]}, args.timeout)
                writer = await stack.enter_async_context(started(writer_spec, args.timeout))
                await call(writer, "open_nodes", {"names": [person_name(1)]}, args.timeout)
                await settled([writer, *idle])  # watchers, model loading, vector cache saves
                before = [cpu_seconds(s.pid) for s in (writer, *idle)]
                for k in range(1, args.writes + 1):
                    await call(writer, "add_observations", addition(n, k, "w"), args.timeout)
                    await anyio.sleep(0.2)
                await settled([writer, *idle])
                spent = [cpu_seconds(s.pid) - b for s, b in zip((writer, *idle), before)]
                next_search = await call(idle[0], "search_nodes", query(1), args.timeout)
            per_write = [s / args.writes for s in spent]
            idle_mean = statistics.mean(per_write[1:])
            rows.append(
                f"| {size:,} | {label} | {per_write[0]:.4f} | {idle_mean:.4f} | {idle_mean / per_write[0]:.2f} "
                f"| {fmt_ms(next_search)} ms |"
            )
    print("\n".join(rows))
    print(
        f"\n{args.writes} add_observations of one observation each, 0.2 s apart; CPU-seconds (user + system) from the "
        "first write until no server has used CPU for 2 s. The idle servers' next search pays what they deferred.\n",
        flush=True,
    )


async def settled(servers: list[Running], quiet: float = 2.0, longest: float = 300.0) -> None:
    """Wait until none of `servers` has used CPU for `quiet` seconds (at most `longest`): work an outside write
    started (a re-read, a re-index) is counted however long it takes."""
    began, last = time.monotonic(), [cpu_seconds(s.pid) for s in servers]
    still_since = time.monotonic()
    while time.monotonic() - began < longest:
        await anyio.sleep(0.5)
        now = [cpu_seconds(s.pid) for s in servers]
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            return


# ---- resident memory ------------------------------------------------------------------------------------------


async def part_rss(args: argparse.Namespace, work: Path, entry: Path | None) -> None:
    print(f"## Resident memory (load {load()})\n")
    rows = ["| server | ours RSS MiB (peak) | official RSS MiB (peak) |", "|---|---:|---:|"]
    rows.append(await rss_empty_memory(args, work, entry))
    rows += await rss_ten_thousand(args, work, entry)
    rows.append(await rss_projects(args, work))
    print("\n".join(rows))
    print("\nVmRSS at the end of each scenario, VmHWM (peak) in brackets.\n", flush=True)


def rss_cell(pid: int | None) -> str:
    now, peak = memory_mib(pid), memory_mib(pid, "VmHWM")
    return "–" if now is None else f"{now:.0f} ({peak:.0f})"


async def rss_empty_memory(args: argparse.Namespace, work: Path, entry: Path | None) -> str:
    """A large memory is searched first in the same cache folder, so its vectors are cached when the empty memory's
    server starts: what that server holds after its first search is what the other caches cost it."""
    big = copy_of(graph_file(work, entities_for(max(args.sizes))), work, "big")
    async with started(ours(big, args.code), args.timeout) as server:
        await call(server, "search_nodes", query(0), args.timeout)
    async with started(ours(copy_of(work / "none.jsonl", work, "empty"), args.code), args.timeout) as server:
        await call(server, "search_nodes", query(1), args.timeout)
        ours_cell = rss_cell(server.pid)
    official_cell = "–"
    if entry is not None:
        async with started(official(entry, copy_of(work / "none.jsonl", work, "empty-up")), args.timeout) as up:
            await call(up, "search_nodes", {"query": "espresso"}, args.timeout)
            official_cell = rss_cell(up.pid)
    home = SHARED_HOME[0] or work
    cache = sum(f.stat().st_size for f in home.rglob("*") if f.is_file() and "xdg-cache" in f.parts) / 2**20
    label = f"empty memory, after its first search ({cache:.0f} MiB of other memories' vectors cached on disk)"
    return f"| {label} | {ours_cell} | {official_cell} |"


async def official_tools(server: Running, n: int, timeout: float) -> None:
    """The calls both servers have: open, substring search, create, add and delete an observation."""
    substring = {"mode": "keyword"} if server.spec.label == "ours" else {}
    await call(server, "open_nodes", {"names": [person_name(3)]}, timeout)
    await call(server, "search_nodes", {"query": person_name(5), **substring}, timeout)
    await call(server, "create_entities", newcomer(1, "rss"), timeout)
    await call(server, "add_observations", addition(n, 1, "rss"), timeout)
    await call(server, "delete_observations", point_arguments("delete_observations", n, 11), timeout)


async def rss_ten_thousand(args: argparse.Namespace, work: Path, entry: Path | None) -> list[str]:
    n = 10_000
    master = graph_file(work, n)
    official_cell = "–"
    if entry is not None:
        async with started(official(entry, copy_of(master, work, "rss-up")), args.timeout) as up:
            await official_tools(up, n, args.timeout)
            official_cell = rss_cell(up.pid)
    async with started(ours(copy_of(master, work, "rss"), args.code), args.timeout) as server:
        await official_tools(server, n, args.timeout)
        after_tools = rss_cell(server.pid)
        await call(server, "search_nodes", query(2), args.timeout)
        after_search = rss_cell(server.pid)
    return [
        f"| 10,000 entities, after open, substring search, create, add, delete observations | {after_tools} "
        f"| {official_cell} |",
        f"| the same, then one of our default searches | {after_search} | – |",
    ]


async def rss_projects(args: argparse.Namespace, work: Path) -> str:
    home = work / f"projects-home-{uuid.uuid4().hex[:8]}"
    (home / "contexts-config").mkdir(parents=True)
    (home / "contexts-config" / "contexts.json").write_text(
        '{"activeContext": "project", "contexts": [{"name": "default", "path": "%s"}, '
        '{"name": "project", "path": "{projectDir}/.ai-memory.jsonl"}]}' % (home / "default.jsonl")
    )
    master = graph_file(work, 4_800)  # about 2 MB
    projects = []
    for number in range(40):
        folder = home / "projects" / f"p{number:02d}"
        (folder / ".git").mkdir(parents=True)
        shutil.copyfile(master, folder / ".ai-memory.jsonl")
        projects.append(folder)
    spec = ours(home / "default.jsonl", args.code, home=home)
    spec.args.remove("--memory-path")
    spec.args.remove(str((home / "default.jsonl").resolve()))
    async with started(spec, args.timeout) as server:
        await call(server, "list_contexts", {}, args.timeout)
        start = memory_mib(server.pid) or 0.0
        for number, folder in enumerate(projects):
            where = {"projectDir": str(folder)}
            await call(server, "open_nodes", {"names": [person_name(number)], **where}, args.timeout)
            await call(server, "add_observations", {**addition(4_800, number, "p"), **where}, args.timeout)
        end = memory_mib(server.pid) or 0.0
        peak = memory_mib(server.pid, "VmHWM") or 0.0
    label = f"40 project memories of {master.stat().st_size / 1e6:.1f} MB touched: {start:.0f} → {end:.0f} MiB"
    return f"| {label} (+{end - start:.0f}) | {end:.0f} ({peak:.0f}) | – |"


# ---- start-up ------------------------------------------------------------------------------------------------


async def part_start(args: argparse.Namespace, work: Path, entry: Path | None) -> None:
    print(f"## Start-up (load {load()})\n")
    master = graph_file(work, 10_000)
    rows = ["| server | spawn → initialize ms | spawn → first tool result ms (tools/list, open_nodes, 10k entities) |",
            "|---|---:|---:|"]
    specs = [("ours", lambda: ours(copy_of(master, work, "start"), args.code))]
    if entry is not None:
        specs.append(("official", lambda: official(entry, copy_of(master, work, "start-up"))))
    results: dict[str, tuple[float | None, float | None]] = {}
    for label, make in specs:
        to_init, to_tool = [], []
        for _ in range(args.starts):
            spec = make()
            begin = time.perf_counter()
            async with started(spec, args.timeout) as server:
                to_init.append((time.perf_counter() - begin) * 1000)
                await server.session.list_tools()
                await call(server, "open_nodes", {"names": [person_name(7)]}, args.timeout)
                to_tool.append((time.perf_counter() - begin) * 1000)
        results[label] = (median(to_init), median(to_tool))
        rows.append(f"| {label} | {fmt_ms(results[label][0])} | {fmt_ms(results[label][1])} |")
    if "official" in results:
        up, me = results["official"], results["ours"]
        rows.append(f"| ratio official/ours | {ratio(up[0], me[0])} | {ratio(up[1], me[1])} |")
    print("\n".join(rows))
    print(f"\nMedians of {args.starts} starts each.\n")
    print(import_profile(args.code), flush=True)


def import_profile(code: Path | None) -> str:
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}
    lines = []
    for label, command in (
        ("--version", [sys.executable, "-X", "importtime", "-m", "memory_server", "--version"]),
        ("the server's modules", [sys.executable, "-X", "importtime", "-c", "import memory_server.server"]),
    ):
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=120)
        total, heavy = 0, []
        for line in done.stderr.splitlines():
            match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
            if match and not match.group(2).startswith(" "):
                total += int(match.group(1))
                heavy.append((int(match.group(1)), match.group(2).strip()))
        biggest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in sorted(heavy, reverse=True)[:4])
        heavy_ones = ("numpy", "model2vec", "mcp", "pydantic")
        loaded = [name for name in heavy_ones if re.search(rf"\| +{name}$", done.stderr, re.M)]
        lines.append(f"- importtime, {label}: {total / 1000:.0f} ms of imports (largest: {biggest} ms); "
                     f"loaded: {', '.join(loaded) or 'none of numpy, model2vec, mcp, pydantic'}")
    return "\n".join(lines) + "\n"


# ---- point writes --------------------------------------------------------------------------------------------


POINT_TOOLS = ("open_nodes", "create_entities", "add_observations", "delete_observations", "create_relations",
               "delete_relations", "delete_entities")


def point_arguments(tool: str, n: int, k: int) -> dict[str, Any]:
    i = (k * 104729 + 17) % n
    name = person_name(i)
    if tool == "open_nodes":
        return {"names": [name]}
    if tool == "create_entities":
        return newcomer(k, "point")
    if tool == "add_observations":
        return addition(n, k, "point")
    if tool == "delete_observations":
        target = f"Reports to {person_name(partner_of(i, n))} on the quarterly roadmap"
        return {"deletions": [{"entityName": name, "observations": [target]}]}
    partner = person_name((i * 31 + 5) % n)
    if tool in ("create_relations", "delete_relations"):
        return {"relations": [{"from": name, "to": partner, "relationType": "bench_link"}]}
    return {"entityNames": [f"point newcomer #{k}"]}  # delete_entities: the ones create_entities made


async def part_writes(args: argparse.Namespace, work: Path, entry: Path | None) -> None:
    print(f"## Point operations (load {load()})\n")
    header = "| observations | file MB | one full atomic rewrite ms | " + " | ".join(POINT_TOOLS) + " |"
    rows = [header, "|---:|---:|---:|" + "---:|" * len(POINT_TOOLS)]
    for size in args.sizes:
        n = entities_for(size)
        master = graph_file(work, n)
        mine = await point_times(started(ours(copy_of(master, work, "point"), args.code), args.timeout), n, args)
        theirs = (
            await point_times(started(official(entry, copy_of(master, work, "point-up")), args.timeout), n, args)
            if entry
            else {}
        )
        cells = []
        for tool in POINT_TOOLS:
            o, u = mine.get(tool), theirs.get(tool)
            cells.append(f"{fmt_ms(o)} / {fmt_ms(u)} ({ratio(u, o)})" if u else fmt_ms(o))
        floor = rewrite_floor(master, work)
        rows.append(f"| {size:,} | {master.stat().st_size / 1e6:.1f} | {fmt_ms(floor)} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    print(
        f"\nours / official ms (ratio official/ours), medians of {args.repeat} calls after one warm-up; each call on "
        "another entity. A full atomic rewrite: copy the file, fsync, rename, fsync the folder (median of 5).\n",
        flush=True,
    )


async def point_times(server_cm: Any, n: int, args: argparse.Namespace) -> dict[str, float | None]:
    times: dict[str, float | None] = {}
    async with server_cm as server:
        await call(server, "open_nodes", {"names": [person_name(0)]}, args.timeout)  # loads the graph
        for tool in POINT_TOOLS:
            measured = []
            for k in range(args.repeat + 1):
                elapsed = await call(server, tool, point_arguments(tool, n, k), args.timeout)
                if k:
                    measured.append(elapsed)
            times[tool] = median(measured)
    return times


def rewrite_floor(master: Path, work: Path) -> float | None:
    source = copy_of(master, work, "floor")
    times = []
    for k in range(5):
        temp = source.with_name(f".floor-{k}.tmp")
        begin = time.perf_counter()
        with open(source, "rb") as old, open(temp, "wb") as new:
            shutil.copyfileobj(old, new, 1 << 20)
            new.flush()
            os.fsync(new.fileno())
        os.replace(temp, source)
        folder = os.open(source.parent, os.O_RDONLY)
        os.fsync(folder)
        os.close(folder)
        times.append((time.perf_counter() - begin) * 1000)
    return median(times)


# ---- main ---------------------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[argparse.Namespace, Path, Path | None], Awaitable[None]]] = {
    "search": part_search,
    "idle": part_idle,
    "rss": part_rss,
    "start": part_start,
    "writes": part_writes,
}


async def main_async(args: argparse.Namespace) -> None:
    entry = None if args.no_official else ensure_upstream(args.upstream_dir, args.timeout * 3)
    code = args.code or Path(__file__).resolve().parent.parent
    revision = subprocess.run(["git", "-C", str(code), "describe", "--always", "--dirty"], capture_output=True,
                              text=True).stdout.strip()
    print(f"# bench/scale.py: ours from {code} ({revision or 'not a git checkout'}); official "
          f"@modelcontextprotocol/server-memory@{UPSTREAM_VERSION}; sizes {args.sizes} observations; "
          f"load {load()}\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as folder:
        SHARED_HOME[0] = Path(folder) / "shared-home"
        for part in args.only:
            await RUNNERS[part](args, Path(folder), entry)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts to run, comma-separated: {', '.join(PARTS)}")
    parser.add_argument("--sizes", default="10000,50000,200000", help="observations (5 per entity), comma-separated")
    parser.add_argument("--repeat", type=int, default=9, help="calls per median (default 9)")
    parser.add_argument("--writes", type=int, default=20, help="writes in the idle part (default 20)")
    parser.add_argument("--starts", type=int, default=7, help="starts per server in the start part (default 7)")
    parser.add_argument("--code", type=Path, help="the checkout whose memory_server runs (default: this one)")
    parser.add_argument("--no-official", action="store_true", help="leave the official server out")
    upstream = Path(tempfile.gettempdir()) / f"mcp-server-memory-{UPSTREAM_VERSION}"
    parser.add_argument("--upstream-dir", type=Path, default=upstream, help="npm prefix of the official server")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for start-up and each call")
    args = parser.parse_args()
    args.only = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = set(args.only) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if args.code is not None:
        args.code = args.code.resolve()
    return args


if __name__ == "__main__":
    anyio.run(main_async, parse_args())
