"""What each result costs the agent: characters and estimated tokens of every tool's result, of the graph
resource and of `tools/list`, ours against the official `@modelcontextprotocol/server-memory`, and the time to
page through a whole graph.

Run it from the repository root with the project's virtualenv (node and npm must be on PATH):

    .venv/bin/python bench/tokens.py                       # sizes 200,2000,20000
    .venv/bin/python bench/tokens.py --sizes 2000
    .venv/bin/python bench/tokens.py --max-result-tokens 8000

The graphs, the two servers and the bare JSON-RPC pipe are those of `bench/vs_upstream.py` (imported, not
copied): N people with 5 observations and 1 relation each. Each server gets its own copy of the file and is
driven by the same calls, reads first, then writes; ours searches in keyword mode where the official server
has only its substring search, plus the calls only ours has. A result's size is the larger of its text and its
`structuredContent` (as `json.dumps` writes it); tokens are estimated as characters / 4. "official" at 20,000
entities is what a client refuses (Claude Code stops at about 25,000 tokens).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import vs_upstream as vs  # the official server's installation, the graphs, the bare pipe

PROTOCOL_VERSION = vs.RAW_PROTOCOL_VERSION


@dataclass
class Size:
    text: int
    structured: int
    error: bool = False

    @property
    def chars(self) -> int:
        return max(self.text, self.structured)

    @property
    def tokens(self) -> int:
        return self.chars // 4


def calls(n: int) -> list[tuple[str, str, dict[str, Any], bool]]:
    """(label, tool, arguments, ours only), reads first. Writes use fresh names and touch existing people."""
    people = [vs.person_name(i) for i in range(0, n, max(1, n // 200))][:200]
    batch = [
        {
            "name": f"Bench Newcomer #{k:06d}",
            "entityType": "person",
            "observations": vs.observations_for(k, n, random.Random(k)),
        }
        for k in range(200)
    ]
    return [
        ("read_graph", "read_graph", {}, False),
        ("read_graph detail=names", "read_graph", {"detail": "names"}, True),
        ("read_graph detail=summary", "read_graph", {"detail": "summary"}, True),
        ('read_graph entityType="client"', "read_graph", {"entityType": "client"}, True),
        ('search_nodes "espresso" (keyword)', "search_nodes", {"query": "espresso", "mode": "keyword"}, False),
        ('search_nodes "espresso" (ours: hybrid, top 10)', "search_nodes", {"query": "espresso"}, True),
        ("search_nodes one person's name", "search_nodes", {"query": vs.person_name(n // 3), "mode": "keyword"}, False),
        ("open_nodes 1 name", "open_nodes", {"names": [vs.person_name(1)]}, False),
        ("open_nodes 1 name, depth=2", "open_nodes", {"names": [vs.person_name(1)], "depth": 2}, True),
        (f"open_nodes {len(people)} names", "open_nodes", {"names": people}, False),
        ("create_entities 200", "create_entities", {"entities": batch}, False),
        (
            "create_relations 200",
            "create_relations",
            {"relations": [{"from": e["name"], "to": p, "relationType": "knows"} for e, p in zip(batch, people)]},
            False,
        ),
        (
            "add_observations 200",
            "add_observations",
            {
                "observations": [
                    {"entityName": p, "contents": [f"Visited Bench City #{k}"]} for k, p in enumerate(people)
                ]
            },
            False,
        ),
        (
            "delete_observations 200",
            "delete_observations",
            {
                "deletions": [
                    {"entityName": p, "observations": [f"Visited Bench City #{k}"]} for k, p in enumerate(people)
                ]
            },
            False,
        ),
        ("delete_entities 200", "delete_entities", {"entityNames": [e["name"] for e in batch]}, False),
    ]


def without_mode(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The official server's version of a call: its tools take no `mode`."""
    return {k: v for k, v in arguments.items() if k != "mode"} if tool == "search_nodes" else arguments


def measure(answer: bytes) -> Size:
    message = json.loads(answer)
    result = message.get("result")
    if result is None:
        return Size(len(json.dumps(message.get("error"))), 0, error=True)
    if "contents" in result:  # resources/read
        return Size(sum(len(c.get("text", "")) for c in result["contents"]), 0)
    text = "".join(block.get("text", "") for block in result.get("content", []))
    structured = result.get("structuredContent")
    return Size(len(text), len(json.dumps(structured)) if structured is not None else 0, bool(result.get("isError")))


class Server:
    """One server over a bare JSON-RPC pipe (no SDK client: its cost grows with the square of an answer)."""

    def __init__(self, spec: vs.ServerSpec, cwd: Path) -> None:
        self.proc = vs.spawn(spec, cwd)
        self.next_id = 0
        init = self.request(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "tokens", "version": "1"}},
        )
        self.instructions = json.loads(init)["result"].get("instructions") or ""
        vs.send(self.proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})

    def request(self, method: str, params: dict[str, Any]) -> bytes:
        self.next_id += 1
        return vs.rpc(self.proc, self.next_id, method, params)

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bytes, float]:
        start = time.perf_counter()
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        return answer, (time.perf_counter() - start) * 1000

    def close(self) -> None:
        vs.stop(self.proc)
        vs.RAW_PROCESSES.discard(self.proc)


@dataclass
class Run:
    sizes: dict[str, Size]
    tools_list: int
    instructions: int
    paging_ms: float
    pages: int
    paged_entities: int


def drive(spec: vs.ServerSpec, n: int, ours: bool, cwd: Path) -> Run:
    server = Server(spec, cwd)
    try:
        tools_list = len(json.dumps(json.loads(server.request("tools/list", {}))["result"]))
        server.call("open_nodes", {"names": [vs.person_name(0)]})  # loads the graph
        sizes: dict[str, Size] = {}
        sizes["resource memory://knowledge-graph"] = measure(
            server.request("resources/read", {"uri": "memory://knowledge-graph"})
        )
        pages, entities, paging_ms, cursor = 0, 0, 0.0, None
        while True:  # the whole graph, page by page (the official server: one read_graph)
            answer, ms = server.call("read_graph", {"cursor": cursor} if cursor else {})
            paging_ms += ms
            pages += 1
            structured = json.loads(answer)["result"].get("structuredContent") or {}
            entities += len(structured.get("entities", []))
            cursor = structured.get("nextCursor") if ours else None
            if not cursor:
                break
        for label, tool, arguments, ours_only in calls(n):
            if ours_only and not ours:
                continue
            sizes[label] = measure(server.call(tool, arguments if ours else without_mode(tool, arguments))[0])
        return Run(sizes, tools_list, len(server.instructions), paging_ms, pages, entities)
    finally:
        server.close()


def fmt(size: Size | None) -> str:
    if size is None:
        return "–"
    flag = " (error)" if size.error else ""
    return f"{size.chars:,} / {size.tokens:,}{flag}"


def table(n: int, file_mb: float, official: Run, ours: Run, budget: int) -> str:
    rows = [
        (
            f"### {n:,} entities, {5 * n:,} observations, {n:,} relations ({file_mb:.1f} MB); ours with a budget "
            f"of {budget:,} tokens"
        ),
        "",
        "| result | official chars / ~tokens | ours chars / ~tokens |",
        "|---|---:|---:|",
    ]
    for label in ours.sizes:
        rows.append(f"| {label} | {fmt(official.sizes.get(label))} | {fmt(ours.sizes[label])} |")
    rows += [
        (
            f"| tools/list | {official.tools_list:,} / {official.tools_list // 4:,} | "
            f"{ours.tools_list:,} / {ours.tools_list // 4:,} |"
        ),
        f"| initialize instructions | {official.instructions:,} | {ours.instructions:,} |",
        (
            f"| whole graph through read_graph: calls, ms | {official.pages}, {official.paging_ms:,.0f} "
            f"({official.paged_entities:,} entities) | {ours.pages}, {ours.paging_ms:,.0f} "
            f"({ours.paged_entities:,} entities) |"
        ),
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200,2000,20000", type=lambda s: [int(x) for x in s.split(",") if x.strip()])
    parser.add_argument("--max-result-tokens", type=int, default=20_000, help="our budget (default: 20000)")
    parser.add_argument(
        "--upstream-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / f"mcp-server-memory-{vs.UPSTREAM_VERSION}",
        help="npm prefix holding (or to receive) the official server",
    )
    args = parser.parse_args()
    entry = vs.ensure_upstream(args.upstream_dir, 600)
    print(vs.machine_description(vs.node_version()) + "\n")
    print(f"Official: {vs.UPSTREAM_PACKAGE}@{vs.UPSTREAM_VERSION}; ours: {vs.ours_description()}.\n")
    try:
        with tempfile.TemporaryDirectory(prefix="memory-tokens-") as tmp:
            work = Path(tmp)
            for n in args.sizes:
                master, file_mb = vs.prepare_file(work, n)
                official = drive(vs.upstream_spec(entry, vs.copy_for(master, work, "upstream")), n, False, work)
                spec = vs.ours_spec(vs.copy_for(master, work, "ours"))
                spec.env["MEMORY_MAX_RESULT_TOKENS"] = str(args.max_result_tokens)
                ours = drive(spec, n, True, work)
                print(table(n, file_mb, official, ours, args.max_result_tokens) + "\n", flush=True)
                vs.remove_size_files(work, n)
    finally:
        vs.kill_raw_processes()


if __name__ == "__main__":
    main()
