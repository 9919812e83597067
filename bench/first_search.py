"""The first hybrid search of a real server, and the memory it holds afterwards (issue 14).

Runs `python -m memory_server` over stdio in one temporary home, three times:
1. on a memory of N synthetic observations (as bench/search_speed.py makes them), with no vector cache yet: the
   time of the first hybrid search, and the server's RSS after it (VmRSS) and at its peak (VmHWM);
2. on the same memory, in a new server, with the vector cache the first run left;
3. on a memory of one entity, with the large memory's cache on disk: RSS before and after its first search
   (issue 14's goal: under 150 MiB, whatever other caches exist).
Then it lists the vector cache files. `--code` runs another checkout's memory_server (e.g. an export of main).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/first_search.py [--observations 200000] [--code PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from search_speed import synthetic_graph

REPO = Path(__file__).resolve().parent.parent
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--observations", type=int, default=200_000)
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose memory_server runs (default: this)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case; medians are printed")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        large, small = home / "large.jsonl", home / "small.jsonl"
        write_memory(large, options.observations)
        small.write_text(
            json.dumps({"type": "entity", "name": "Ann", "entityType": "person", "observations": ["likes tea"]}) + "\n"
        )
        rows = []
        for case, memory, fresh in (
            ("first search, no cache", large, True),
            ("first search, cache on disk", large, False),
            ("1-entity memory, the large cache on disk", small, False),
        ):
            runs = [first_search(options.code, home, memory, clear_cache=fresh) for _ in range(options.repeat)]
            rows.append((case, *(statistics.median(r[i] for r in runs) for i in range(4))))
        print(
            f"code: {options.code}; {options.observations:,} observations in the large memory; "
            f"medians of {options.repeat} run(s)"
        )
        print("| case | search s | RSS before MiB | RSS after MiB | peak RSS MiB |")
        print("|---|---|---|---|---|")
        for case, seconds, before, after, peak in rows:
            print(f"| {case} | {seconds:.2f} | {before:.0f} | {after:.0f} | {peak:.0f} |")
        print("\nvector caches on disk:")
        for path in sorted((home / "cache").rglob("*")):
            if path.is_file() and not path.name.endswith(".lock"):
                print(f"  {path.relative_to(home / 'cache')}: {path.stat().st_size / 2**20:.1f} MiB")


def write_memory(path: Path, observations: int) -> None:
    graph = synthetic_graph(observations)
    path.write_text("".join(line + "\n" for line in graph.lines()), encoding="utf-8")


def first_search(code: Path, home: Path, memory: Path, clear_cache: bool) -> tuple[float, float, float, float]:
    """Start a server on `memory`, wait for its model, search once; (seconds, RSS before, after, peak)."""
    if clear_cache:
        for path in (home / "cache").rglob("*"):
            if path.is_file():
                path.unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1",
        **{name: str(home / name.lower()) for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")},
    )
    env["XDG_CACHE_HOME"] = str(home / "cache")
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "--memory-path", str(memory), "--log-level", "error"],
        cwd=code,  # `python -m` imports memory_server from the current folder first
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        call(server, "initialize", HELLO, 0)
        send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        time.sleep(3)  # the model loads in the background a second after the handshake
        before = status(server.pid, "VmRSS")
        started = time.perf_counter()
        answer = call(server, "tools/call", {"name": "search_nodes", "arguments": {"query": "who went cycling"}}, 1)
        seconds = time.perf_counter() - started
        assert not answer["result"].get("isError"), answer
        return seconds, before, status(server.pid, "VmRSS"), status(server.pid, "VmHWM")
    finally:
        assert server.stdin is not None
        server.stdin.close()  # a clean end: a server that saves its cache at exit does so
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def call(server: subprocess.Popen[bytes], method: str, params: dict, number: int) -> dict:
    send(server, {"jsonrpc": "2.0", "id": number, "method": method, "params": params})
    assert server.stdout is not None
    while True:
        answer = json.loads(server.stdout.readline())
        if answer.get("id") == number:
            return answer


def send(server: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert server.stdin is not None
    server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()


def status(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float(np.nan)


if __name__ == "__main__":
    main()
