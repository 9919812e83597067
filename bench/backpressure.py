"""Memory of a server whose client sends requests and never reads the answers (issue 13, finding 13).

A thread writes `read_graph` calls as fast as the server takes them and never reads stdout; every second the
server's resident memory (VmRSS) and the number of requests it has taken are printed. With backpressure the
server stops reading once the client stops taking answers, so both figures level off.

    .venv/bin/python bench/backpressure.py                      # this checkout
    .venv/bin/python bench/backpressure.py --code /work/main    # another checkout's memory_server, for comparison
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose memory_server runs (default: this)")
    parser.add_argument("--seconds", type=float, default=30, help="how long the client writes (default: 30)")
    parser.add_argument("--entities", type=int, default=20, help="entities in the graph each answer holds")
    parser.add_argument("--method", choices=["read_graph", "ping"], default="read_graph", help="what the client asks")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run(Path(folder), options.code, options.seconds, options.entities, options.method)


def run(folder: Path, code: Path, seconds: float, entities: int, method: str) -> None:
    memory = folder / "memory.jsonl"
    memory.write_text(
        "".join(
            json.dumps({"type": "entity", "name": f"E{i}", "entityType": "t", "observations": [f"fact {i} " * 8]})
            + "\n"
            for i in range(entities)
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1",
        MEMORY_FILE_PATH=str(memory),
        MEMORY_EMBEDDING_MODEL="none",
        **{name: str(folder / name.lower()) for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")},
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "--log-level", "error"],
        cwd=code,  # `python -m` imports memory_server from the current folder first
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert server.stdin is not None and server.stdout is not None
    send(server, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO})
    answer = json.loads(server.stdout.readline())
    assert "result" in answer, answer
    send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    sent = [0]
    stop = threading.Event()
    writer = threading.Thread(target=flood, args=(server, REQUESTS[method], sent, stop), daemon=True)
    start = time.monotonic()
    writer.start()
    size = answer_size(entities) if method == "read_graph" else 40
    print(f"code: {code}; {method} answers of about {size} bytes each; the client never reads them")
    print(f"{'seconds':>8} {'RSS MiB':>9} {'requests taken':>15}")
    peak = 0.0
    while (elapsed := time.monotonic() - start) < seconds:
        time.sleep(1)
        rss = rss_mib(server.pid)
        peak = max(peak, rss)
        print(f"{elapsed:8.0f} {rss:9.1f} {sent[0]:15,}", flush=True)
    stop.set()
    print(f"peak RSS {peak:.1f} MiB after {seconds:g} s; {sent[0]:,} requests taken by the server")
    server.kill()
    server.wait()


REQUESTS = {
    "read_graph": {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "read_graph", "arguments": {}}},
    "ping": {"jsonrpc": "2.0", "method": "ping"},
}
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def send(server: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert server.stdin is not None
    server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()


def flood(server: subprocess.Popen[bytes], request: dict[str, object], sent: list[int], stop: threading.Event) -> None:
    """Write requests until told to stop; a write blocks when the server no longer reads (the pipe is full)."""
    request_id = 1
    try:
        while not stop.is_set():
            batch = b"".join(
                json.dumps({**request, "id": i}).encode() + b"\n" for i in range(request_id, request_id + 100)
            )
            assert server.stdin is not None
            server.stdin.write(batch)
            server.stdin.flush()
            request_id += 100
            sent[0] = request_id - 1
    except (BrokenPipeError, ValueError):
        pass


def answer_size(entities: int) -> int:
    entity = {"type": "entity", "name": "E10", "entityType": "t", "observations": ["fact 10 " * 8]}
    return 2 * entities * len(json.dumps(entity)) + 200  # text and structuredContent both hold the graph


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    main()
