"""Side-by-side benchmark: our memory server against the official `@modelcontextprotocol/server-memory`.

Run it from the repository root with the project's virtualenv (node and npm must be on PATH):

    .venv/bin/python bench/vs_upstream.py                          # sizes 1000,10000,50000
    .venv/bin/python bench/vs_upstream.py --sizes 1000 --repeat 5  # quick look
    .venv/bin/python bench/vs_upstream.py --ours-only 100000       # also our server alone at 100k entities
    .venv/bin/python bench/vs_upstream.py --upstream-dir /tmp/upstream

What it measures. For each size N it writes one graph file (N entities with 5 short observations and 1 relation
each, in the shared JSONL format) and gives each server its own copy. Both servers run as real stdio subprocesses
(upstream: `node dist/index.js` with MEMORY_FILE_PATH; ours: `python -m memory_server --memory-path`) and are
driven one after the other by the same client, the official MCP Python SDK. It times:

- start-up: from spawning the process to the answer to `initialize`;
- first call: the first `open_nodes` after that (our server loads the graph lazily, upstream reads the file on
  every call anyway);
- per tool, the median round trip of sequential calls, each on fresh arguments after one untimed warm-up call:
  create_entities (1 new entity), add_observations (1), open_nodes (1 name), search_nodes (a person's name; ours
  with mode="keyword" when the tool has a `mode` parameter), our default search_nodes (no mode; its warm-up call,
  which embeds the graph, is reported too), delete_observations (1) and read_graph (no warm-up, fewer calls on
  large graphs);
- read_graph again over a bare JSON-RPC pipe in a second process (time to the answer's last byte), because the
  SDK client's own cost grows with the square of the answer's size and swamps both servers on big graphs;
- the peak resident memory (VmHWM) of each server process (of the SDK-driven run).

It prints one markdown table per size with both figures and the ratio upstream/ours, and for `--ours-only` a table
of our server alone. Upstream is installed with npm into `--upstream-dir` when it is not there already.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

UPSTREAM_PACKAGE = "@modelcontextprotocol/server-memory"
UPSTREAM_VERSION = "2026.8.31"
REPO_ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------------------------
# Test data: a deterministic, realistic-looking graph
# ---------------------------------------------------------------------------------------------------------------

FIRST = "Ada Ben Chloe Dmitri Elena Farid Grace Hiro Ines Jonas Kira Luca Maya Nils Olga Pablo Rosa Sami Tara Yusuf"
LAST = "Moreau Tanaka Rossi Novak Okafor Lindqvist Garcia Nguyen Kowalski Haddad Silva Weber Murphy Costa Ivanova"
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella Labs", "Stark Industries", "Hooli", "Vandelay Imports"]
ROLES = ["data engineer", "product manager", "nurse", "teacher", "architect", "chef", "UX designer", "lawyer"]
CITIES = ["Lisbon", "Osaka", "Berlin", "Nairobi", "Montreal", "Lyon", "Krakow", "Austin", "Bergen", "Porto"]
DRINKS = ["espresso", "green tea", "oat latte", "sparkling water", "black coffee", "chai"]
HOBBIES = ["bouldering", "sourdough baking", "chess", "trail running", "watercolour", "sailing"]
LANGUAGES = ["Portuguese", "Japanese", "German", "Swahili", "French", "Polish", "Spanish"]
SKILLS = ["Rust", "the cello", "pottery", "Kubernetes", "Italian", "woodworking", "statistics"]
TYPES = ["person", "person", "person", "colleague", "client", "friend"]
RELATION_TYPES = ["knows", "works_with", "reports_to", "mentors", "is_neighbour_of"]


def person_name(i: int) -> str:
    first, last = FIRST.split(), LAST.split()
    return f"{first[i % len(first)]} {last[(i // len(first)) % len(last)]} #{i:06d}"


def observations_for(i: int, n: int, rng: random.Random) -> list[str]:
    return [
        f"Works at {rng.choice(COMPANIES)} as a {rng.choice(ROLES)}",
        f"Lives in {rng.choice(CITIES)} since {rng.randint(1995, 2025)}",
        f"Prefers {rng.choice(DRINKS)} and {rng.choice(HOBBIES)} on weekends",
        f"Speaks {rng.choice(LANGUAGES)} and is learning {rng.choice(SKILLS)}",
        f"Reports to {person_name(partner_of(i, n))} on the quarterly roadmap",
    ]


def partner_of(i: int, n: int) -> int:
    return (i * 7 + 1) % n


def write_graph(path: Path, n: int, seed: int = 42) -> None:
    """N entities (5 observations each), then N relations, one JSON object per line."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            line = {
                "type": "entity",
                "name": person_name(i),
                "entityType": rng.choice(TYPES),
                "observations": observations_for(i, n, rng),
            }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        for i in range(n):
            line = {
                "type": "relation",
                "from": person_name(i),
                "to": person_name(partner_of(i, n)),
                "relationType": rng.choice(RELATION_TYPES),
            }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# The two servers
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ServerSpec:
    label: str
    command: str
    args: list[str]
    env: dict[str, str]
    marker: str  # a string unique to this process's command line or environment, to find its pid


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


def upstream_spec(entry: Path, memory_file: Path) -> ServerSpec:
    env = base_env(MEMORY_FILE_PATH=str(memory_file.resolve()))
    return ServerSpec("upstream", shutil.which("node") or "node", [str(entry)], env, str(memory_file.resolve()))


def ours_spec(memory_file: Path) -> ServerSpec:
    """Our server with its context registry, data and vector cache in the memory file's private folder."""
    home = memory_file.parent
    env = base_env(
        MEMORY_CONTEXTS_DIR=str(home / "contexts-config"),
        XDG_DATA_HOME=str(home / "xdg-data"),
        XDG_CACHE_HOME=str(home / "xdg-cache"),
        MEMORY_LOG_LEVEL="warning",
        MEMORY_MAX_RESULT_TOKENS="0",  # the same work as upstream: read_graph gives the whole graph in one answer
    )
    args = ["-m", "memory_server", "--memory-path", str(memory_file.resolve())]
    return ServerSpec("ours", sys.executable, args, env, str(memory_file.resolve()))


def ensure_upstream(upstream_dir: Path, timeout: float) -> Path:
    """Path of upstream's dist/index.js, installing the pinned version with npm when it is missing."""
    package_dir = upstream_dir / "node_modules" / UPSTREAM_PACKAGE
    entry = package_dir / "dist" / "index.js"
    if installed_version(package_dir) != UPSTREAM_VERSION or not entry.is_file():
        upstream_dir.mkdir(parents=True, exist_ok=True)
        print(f"Installing {UPSTREAM_PACKAGE}@{UPSTREAM_VERSION} into {upstream_dir} ...", file=sys.stderr)
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(upstream_dir),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"{UPSTREAM_PACKAGE}@{UPSTREAM_VERSION}",
            ],
            check=True,
            timeout=timeout,
            stdout=sys.stderr,
        )
    if installed_version(package_dir) != UPSTREAM_VERSION or not entry.is_file():
        sys.exit(f"{UPSTREAM_PACKAGE}@{UPSTREAM_VERSION} is not at {entry} after npm install")
    return entry


def installed_version(package_dir: Path) -> str | None:
    try:
        return json.loads((package_dir / "package.json").read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# Finding a server's process and its peak memory
# ---------------------------------------------------------------------------------------------------------------


def find_pid(marker: str) -> int | None:
    """The pid of the process (not us) whose command line or environment contains `marker`."""
    try:
        import psutil  # optional
    except ImportError:
        psutil = None
    if psutil is not None:
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and marker in " ".join(proc.cmdline()) + str(proc.environ()):
                    return proc.pid
            except psutil.Error:
                continue
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and process_mentions(entry, marker):
            return int(entry.name)
    return None


def process_mentions(proc_dir: Path, marker: str) -> bool:
    needle = marker.encode()
    for name in ("cmdline", "environ"):
        try:
            if needle in (proc_dir / name).read_bytes():
                return True
        except OSError:
            continue
    return False


def peak_rss_mb(pid: int | None) -> float | None:
    """VmHWM (peak resident set size) of `pid` in MiB, from /proc/<pid>/status."""
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+)\s+kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


# ---------------------------------------------------------------------------------------------------------------
# The workload: one function per timed operation, each returning fresh arguments for call number k
# ---------------------------------------------------------------------------------------------------------------

Arguments = Callable[[int], dict[str, Any]]


@dataclass
class Operation:
    label: str
    tool: str
    arguments: Arguments
    repeat: int
    ours_only: bool = False
    warm_up: bool = True
    report_first: bool = False  # also show the warm-up call's time


def workload(n: int, repeat: int, read_graph_repeat: int, search_mode: str | None) -> list[Operation]:
    """The timed operations, reads first; each call k touches a different entity (index picks never repeat)."""
    picks = random.Random(n).sample(range(n), min(n, 6 * (repeat + 1)))

    def entity(slot: int, k: int) -> str:  # distinct entities per operation and per call
        return person_name(picks[(slot * (repeat + 1) + k) % len(picks)])

    def search(k: int) -> dict[str, Any]:
        args: dict[str, Any] = {"query": entity(1, k)}
        if search_mode:
            args["mode"] = search_mode
        return args

    def fresh_entity(k: int) -> dict[str, Any]:
        joined = f"Joined {COMPANIES[k % len(COMPANIES)]} in {CITIES[k % len(CITIES)]}"
        return {"entities": [{"name": f"Bench Newcomer #{k:06d}", "entityType": "person", "observations": [joined]}]}

    def new_observation(k: int) -> dict[str, Any]:
        trip = f"Mentioned a trip to {CITIES[k % len(CITIES)]} (#{k})"
        return {"observations": [{"entityName": entity(3, k), "contents": [trip]}]}

    def deletion(k: int) -> dict[str, Any]:  # every entity has this observation: "Reports to <partner> ..."
        i = int(entity(4, k).rsplit("#", 1)[1])
        target = f"Reports to {person_name(partner_of(i, n))} on the quarterly roadmap"
        return {"deletions": [{"entityName": entity(4, k), "observations": [target]}]}

    ops = [
        Operation("open_nodes", "open_nodes", lambda k: {"names": [entity(0, k)]}, repeat),
        Operation("search_nodes", "search_nodes", search, repeat),
        Operation(
            "search_nodes (ours default)",
            "search_nodes",
            lambda k: {"query": entity(2, k)},
            repeat,
            ours_only=True,
            report_first=True,
        ),
        Operation("create_entities", "create_entities", fresh_entity, repeat),
        Operation("add_observations", "add_observations", new_observation, repeat),
        Operation("delete_observations", "delete_observations", deletion, repeat),
        Operation("read_graph", "read_graph", lambda k: {}, read_graph_repeat, warm_up=False),
    ]
    return ops


# ---------------------------------------------------------------------------------------------------------------
# Driving one server
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    median_ms: float | None = None
    calls: int = 0
    error: str | None = None
    first_ms: float | None = None  # the warm-up call
    answer_mb: float | None = None  # raw read_graph: size of the answer


@dataclass
class ServerResult:
    label: str
    startup_ms: float | None = None
    first_call_ms: float | None = None
    peak_rss_mb: float | None = None
    timings: dict[str, Timing] = field(default_factory=dict)
    error: str | None = None
    search_mode: str | None = None
    raw_read_graph: Timing | None = None


async def timed_call(session: ClientSession, tool: str, arguments: dict[str, Any], timeout: float) -> float:
    """Round-trip time of one tool call in ms; raises on an error result or a timeout."""
    start = time.perf_counter()
    with anyio.fail_after(timeout):
        result = await session.call_tool(tool, arguments)
    elapsed = (time.perf_counter() - start) * 1000
    if result.is_error:
        raise RuntimeError(f"{tool} returned an error: {text_of(result)[:300]}")
    return elapsed


async def check_loaded(session: ClientSession, name: str, timeout: float) -> None:
    """Fail unless open_nodes finds an entity of the prepared graph (the server read our file)."""
    with anyio.fail_after(timeout):
        result = await session.call_tool("open_nodes", {"names": [name]})
    if result.is_error or json.dumps(name)[1:-1] not in text_of(result):
        raise RuntimeError(f"the server did not find {name!r} of the prepared graph: {text_of(result)[:300]}")


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def time_operation(session: ClientSession, op: Operation, timeout: float) -> Timing:
    """A warm-up call (k=0) unless op.warm_up is off, then op.repeat timed calls; the median of those."""
    timing, times = Timing(), []
    try:
        if op.warm_up:
            timing.first_ms = await timed_call(session, op.tool, op.arguments(0), timeout)
        for k in range(1, op.repeat + 1):
            times.append(await timed_call(session, op.tool, op.arguments(k), timeout))
    except TimeoutError:
        timing.error = f"timed out after {timeout:.0f} s"
    except Exception as problem:  # noqa: BLE001 - reported in the table
        timing.error = f"{type(problem).__name__}: {problem}"
    timing.median_ms, timing.calls = (statistics.median(times) if times else None), len(times)
    return timing


def keyword_mode(tools: list[Any]) -> str | None:
    """Return "keyword" when our search_nodes takes a `mode` argument that allows it, else None."""
    for tool in tools:
        if tool.name == "search_nodes":
            mode = (tool.input_schema or {}).get("properties", {}).get("mode")
            if mode is None:
                return None
            allowed = mode.get("enum") or [v for option in mode.get("anyOf", []) for v in option.get("enum", [])]
            return "keyword" if not allowed or "keyword" in allowed else None
    return None


async def run_server(
    spec: ServerSpec, ops_for: Callable[[str | None], list[Operation]], log: Path, timeout: float
) -> ServerResult:
    """Spawn the server, time start-up and every operation, read its peak RSS, and shut it down."""
    result = ServerResult(spec.label)
    params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env, cwd=str(log.parent))
    with log.open("w") as errlog:
        try:
            start = time.perf_counter()
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, read_timeout_seconds=timeout) as session,
            ):
                with anyio.fail_after(timeout):
                    await session.initialize()
                result.startup_ms = (time.perf_counter() - start) * 1000
                pid = find_pid(spec.marker)
                ops = await applicable_operations(session, spec, ops_for, result)
                result.first_call_ms = await timed_call(session, "open_nodes", ops[0].arguments(0), timeout)
                await check_loaded(session, person_name(0), timeout)
                for op in ops:
                    result.timings[op.label] = await time_operation(session, op, timeout)
                result.peak_rss_mb = peak_rss_mb(pid)
        except Exception as problem:  # noqa: BLE001 - reported in the table
            result.error = f"{type(problem).__name__}: {problem}; end of the server's stderr: {tail(log)!r}"
    return result


# ---------------------------------------------------------------------------------------------------------------
# read_graph without the SDK client
# ---------------------------------------------------------------------------------------------------------------

RAW_PROTOCOL_VERSION = "2025-06-18"  # one both servers accept
RAW_PROCESSES: set[subprocess.Popen[bytes]] = set()  # killed on exit if still running


def raw_read_graph(spec: ServerSpec, calls: int, timeout: float, cwd: Path) -> Timing:
    """read_graph over a bare JSON-RPC pipe: the time until the answer's last byte, with no client-side parsing.

    The SDK's stdio client joins its line buffer again for every 64 KiB chunk it reads, so its cost grows with the
    square of an answer's size and hides the servers' own time on big graphs; this row measures the servers alone.
    """
    proc = spawn(spec, cwd)
    watchdog = threading.Timer(timeout * (calls + 2), proc.kill)  # bounds every blocking read below
    watchdog.start()
    timing, times = Timing(), []
    try:
        rpc(
            proc,
            1,
            "initialize",
            {
                "protocolVersion": RAW_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "vs_upstream-raw", "version": "1"},
            },
        )
        send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc(proc, 2, "tools/call", {"name": "open_nodes", "arguments": {"names": [person_name(0)]}})  # loads the graph
        for k in range(calls):
            start = time.perf_counter()
            answer = rpc(proc, 10 + k, "tools/call", {"name": "read_graph", "arguments": {}})
            times.append((time.perf_counter() - start) * 1000)
            timing.answer_mb = len(answer) / 1e6
        result = json.loads(answer).get("result")  # checked once, outside the timing
        if result is None or result.get("isError"):
            raise RuntimeError(f"read_graph failed: {answer[:300]!r}")
    except Exception as problem:  # noqa: BLE001 - reported in the table
        timing.error = f"{type(problem).__name__}: {problem}"
    finally:
        watchdog.cancel()
        stop(proc)
        RAW_PROCESSES.discard(proc)
    timing.median_ms, timing.calls = (statistics.median(times) if times else None), len(times)
    return timing


def spawn(spec: ServerSpec, cwd: Path) -> subprocess.Popen[bytes]:
    """Start a server for the bare pipe (killed on exit if still running)."""
    proc = subprocess.Popen(
        [spec.command, *spec.args],
        env=spec.env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    RAW_PROCESSES.add(proc)
    return proc


def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def rpc(proc: subprocess.Popen[bytes], request_id: int, method: str, params: dict[str, Any]) -> bytes:
    """Send a request and return the raw line of its answer (skipping notifications; at most 100 other lines)."""
    send(proc, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    assert proc.stdout is not None
    for _ in range(100):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the server closed its output (exit code {proc.poll()})")
        if is_answer(line, request_id):
            return line
    raise RuntimeError(f"no answer to request {request_id}")


def is_answer(line: bytes, request_id: int) -> bool:
    if len(line) > 1_000_000:  # only a read_graph answer is that big; not worth parsing here
        return True
    message = json.loads(line)
    return message.get("id") == request_id and "method" not in message


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Close stdin (the polite way to end a stdio server), then kill it if it lingers."""
    with contextlib.suppress(OSError):
        proc.stdin.close()  # type: ignore[union-attr]
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def tail(log: Path, chars: int = 600) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


async def applicable_operations(
    session: ClientSession, spec: ServerSpec, ops_for: Callable[[str | None], list[Operation]], result: ServerResult
) -> list[Operation]:
    """Ours: every operation, searching in keyword mode when it has one. Upstream: all but our extra search."""
    if spec.label == "ours":
        result.search_mode = keyword_mode((await session.list_tools()).tools)
        return ops_for(result.search_mode)
    return [op for op in ops_for(None) if not op.ours_only]


# ---------------------------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------------------------


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def cell(timing: Timing | None) -> str:
    if timing is None:
        return "–"
    text = fmt_ms(timing.median_ms)
    return f"{text} (n={timing.calls}, ERROR: {timing.error})" if timing.error else text


def ratio(up: float | None, ours: float | None) -> str:
    if not up or not ours:
        return "–"
    return f"{up / ours:.1f}×" if up / ours >= 1 else f"{up / ours:.2f}×"


def comparison_table(n: int, file_mb: float, up: ServerResult, ours: ServerResult, ops: list[Operation]) -> str:
    labels = [op.label for op in ops]
    first_labels = {op.label for op in ops if op.report_first}
    rows = [
        f"### {n:,} entities, {5 * n:,} observations, {n:,} relations ({file_mb:.1f} MB)",
        "",
        "| tool | upstream ms | ours ms | ratio upstream/ours |",
        "|---|---:|---:|---:|",
        f"| start-up (spawn → initialize) | {fmt_ms(up.startup_ms)} | {fmt_ms(ours.startup_ms)} "
        f"| {ratio(up.startup_ms, ours.startup_ms)} |",
        f"| first call (open_nodes) | {fmt_ms(up.first_call_ms)} | {fmt_ms(ours.first_call_ms)} "
        f"| {ratio(up.first_call_ms, ours.first_call_ms)} |",
    ]
    for label in labels:
        u, o = up.timings.get(label), ours.timings.get(label)
        rows.append(
            f"| {label} | {cell(u)} | {cell(o)} | {ratio(u.median_ms if u else None, o.median_ms if o else None)} |"
        )
        if label in first_labels and o is not None:
            rows.append(f"| {label}, first call | – | {fmt_ms(o.first_ms)} | – |")
    u, o = up.raw_read_graph, ours.raw_read_graph
    rows.append(
        f"| {raw_label(u or o)} | {cell(u)} | {cell(o)} "
        f"| {ratio(u.median_ms if u else None, o.median_ms if o else None)} |"
    )
    rows.append(f"| peak RSS (MiB) | {fmt_mb(up.peak_rss_mb)} | {fmt_mb(ours.peak_rss_mb)} | |")
    rows.append(search_note(ours))
    rows += [f"\n**{r.label} failed:** {r.error}" for r in (up, ours) if r.error]
    return "\n".join(rows)


def ours_table(n: int, file_mb: float, ours: ServerResult, ops: list[Operation]) -> str:
    rows = [
        f"### ours alone: {n:,} entities, {5 * n:,} observations, {n:,} relations ({file_mb:.1f} MB)",
        "",
        "| tool | ours ms | calls |",
        "|---|---:|---:|",
        f"| start-up (spawn → initialize) | {fmt_ms(ours.startup_ms)} | 1 |",
        f"| first call (open_nodes) | {fmt_ms(ours.first_call_ms)} | 1 |",
    ]
    for op in ops:
        timing = ours.timings.get(op.label)
        rows.append(f"| {op.label} | {cell(timing)} | {timing.calls if timing else 0} |")
        if op.report_first and timing is not None:
            rows.append(f"| {op.label}, first call | {fmt_ms(timing.first_ms)} | 1 |")
    raw = ours.raw_read_graph
    rows.append(f"| {raw_label(raw)} | {cell(raw)} | {raw.calls if raw else 0} |")
    rows.append(f"| peak RSS (MiB) | {fmt_mb(ours.peak_rss_mb)} | |")
    rows.append(search_note(ours))
    if ours.error:
        rows.append(f"\n**ours failed:** {ours.error}")
    return "\n".join(rows)


def raw_label(timing: Timing | None) -> str:
    size = f", {timing.answer_mb:.1f} MB answer" if timing and timing.answer_mb else ""
    return f"read_graph, bare pipe (no SDK client{size})"


def search_note(ours: ServerResult) -> str:
    how = f'mode="{ours.search_mode}"' if ours.search_mode else "no `mode` parameter, so its default search"
    return f"\nsearch_nodes: ours called with {how}; upstream has a single substring search."


def fmt_mb(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def machine_description(node_version: str | None) -> str:
    cpu = "unknown CPU"
    try:
        cpu = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE).group(1)
    except (OSError, AttributeError):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import mcp

    sdk = getattr(mcp, "__version__", None) or package_version("mcp")
    return (
        f"Machine: {cpu}, nproc {usable} (of {os.cpu_count()}), {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, node {node_version or 'absent'}, MCP Python SDK {sdk}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def ours_description() -> str:
    """Where our server is imported from, with its git revision (and whether the working tree has changes)."""
    try:
        revision = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        revision = ""
    where = f"{REPO_ROOT} (git {revision or 'unknown'})"
    if os.environ.get("PYTHONPATH"):
        where += f", PYTHONPATH={os.environ['PYTHONPATH']}"
    return where


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def node_version() -> str | None:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------


def read_graph_repeats(n: int, repeat: int) -> int:
    """read_graph moves the whole graph: fewer calls on large graphs (at least 2)."""
    return max(2, min(repeat, 100_000 // n))


def prepare_file(work: Path, n: int) -> tuple[Path, float]:
    """Write the size-n graph (the master copy each server's own copy is taken from); returns it and its MB."""
    master = work / f"graph-{n}.jsonl"
    if not master.exists():
        write_graph(master, n)
    return master, master.stat().st_size / 1e6


def copy_for(master: Path, work: Path, label: str) -> Path:
    folder = work / f"{label}-{master.stem}"
    folder.mkdir(exist_ok=True)
    target = folder / "memory.jsonl"
    shutil.copyfile(master, target)
    return target


async def compare(n: int, args: argparse.Namespace, entry: Path, work: Path) -> None:
    master, file_mb = prepare_file(work, n)
    rg = read_graph_repeats(n, args.repeat)

    def ops_for(mode: str | None) -> list[Operation]:
        return workload(n, args.repeat, rg, mode)

    up_file, ours_file = copy_for(master, work, "upstream"), copy_for(master, work, "ours")
    up = await run_server(upstream_spec(entry, up_file), ops_for, work / f"upstream-{n}.log", args.timeout)
    ours = await run_server(ours_spec(ours_file), ops_for, work / f"ours-{n}.log", args.timeout)
    up.raw_read_graph = await raw_timing(upstream_spec(entry, copy_for(master, work, "upstream-raw")), rg, args)
    ours.raw_read_graph = await raw_timing(ours_spec(copy_for(master, work, "ours-raw")), rg, args)
    print(comparison_table(n, file_mb, up, ours, ops_for(ours.search_mode)) + "\n", flush=True)


async def ours_alone(n: int, args: argparse.Namespace, work: Path) -> None:
    master, file_mb = prepare_file(work, n)
    rg = read_graph_repeats(n, args.repeat)
    ours_file = copy_for(master, work, "ours")
    ours = await run_server(
        ours_spec(ours_file), lambda mode: workload(n, args.repeat, rg, mode), work / f"ours-{n}.log", args.timeout
    )
    ours.raw_read_graph = await raw_timing(ours_spec(copy_for(master, work, "ours-raw")), rg, args)
    print(ours_table(n, file_mb, ours, workload(n, args.repeat, rg, ours.search_mode)) + "\n", flush=True)


async def raw_timing(spec: ServerSpec, calls: int, args: argparse.Namespace) -> Timing:
    folder = Path(spec.marker).parent
    return await anyio.to_thread.run_sync(raw_read_graph, spec, calls, args.timeout, folder)


async def main_async(args: argparse.Namespace) -> bool:
    """Run the benchmark; on SIGINT or SIGTERM cancel it (every server is stopped on the way out). True if done."""
    signals_received: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(cancel_on_signal, group.cancel_scope, signals_received)
        await benchmark(args)
        group.cancel_scope.cancel()
    return not signals_received


async def cancel_on_signal(scope: anyio.CancelScope, received: list[int]) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for number in signals:
            received.append(number)
            print(f"{signal.Signals(number).name}: stopping the servers", file=sys.stderr)
            kill_raw_processes()  # unblocks a bare-pipe measurement running in a worker thread
            scope.cancel()
            return


def kill_raw_processes() -> None:
    for proc in list(RAW_PROCESSES):
        proc.kill()


async def benchmark(args: argparse.Namespace) -> None:
    entry = ensure_upstream(args.upstream_dir, args.timeout * 3) if args.sizes else None
    print(machine_description(node_version()) + "\n", flush=True)
    print(
        f"Upstream: {UPSTREAM_PACKAGE}@{UPSTREAM_VERSION} ({entry}); ours: {ours_description()}. "
        f"Medians of {args.repeat} sequential calls after 1 warm-up call (read_graph: no warm-up, "
        f"fewer calls on large graphs); times are client round trips in ms.\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        work = Path(tmp)
        for n in args.sizes:
            await compare(n, args, entry, work)
            remove_size_files(work, n)
        if args.ours_only:
            await ours_alone(args.ours_only, args, work)


def remove_size_files(work: Path, n: int) -> None:
    for path in [*work.glob(f"*graph-{n}"), work / f"graph-{n}.jsonl"]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000,10000,50000",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        help="comma-separated entity counts for the side-by-side runs ('' for none)",
    )
    parser.add_argument("--repeat", type=int, default=15, help="timed calls per tool (default: 15)")
    parser.add_argument(
        "--ours-only",
        type=int,
        nargs="?",
        const=100_000,
        default=None,
        metavar="N",
        help="also run our server alone on N entities (default N: 100000) and report its peak RSS",
    )
    parser.add_argument(
        "--ours-only-100k", dest="ours_only", action="store_const", const=100_000, help="same as --ours-only 100000"
    )
    parser.add_argument(
        "--upstream-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / f"mcp-server-memory-{UPSTREAM_VERSION}",
        help="npm prefix holding (or to receive) the upstream server",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds allowed for start-up and for each call (default: 120)"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    try:
        finished = anyio.run(main_async, args)
    finally:
        kill_raw_processes()
    if not finished:
        sys.exit("interrupted")


if __name__ == "__main__":
    main()
