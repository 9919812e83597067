"""Write memory_server/lists.json: the SDK's own answers to tools/list, prompts/list and resources/templates/list,
which early.py sends while the SDK is still loading. Run it after changing a tool's name, description, arguments or
annotations (tests/test_early.py fails until then, saying so):

    .venv/bin/python scripts/write_lists.py

It asks a real server, spawned as clients spawn it, with a clientInfo the early answers do not vouch for (an
unknown field), so that every answer comes from the MCP SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "memory_server" / "lists.json"
METHODS = ("tools/list", "prompts/list", "resources/templates/list")


def sdk_lists(version: str = "2025-11-25", *options: str) -> dict[str, Any]:
    """What the SDK-built server answers to each of METHODS, for a client of protocol `version`."""
    client = {"name": "lists", "version": "1", "icon": "sdk"}  # "icon": not a plain initialize, see handshake.py
    hello = {"protocolVersion": version, "capabilities": {}, "clientInfo": client}
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": number, "method": method} for number, method in enumerate(METHODS, 1)),
    ]
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
        env.update(HF_HUB_OFFLINE="1", MEMORY_CONTEXTS_DIR=f"{folder}/contexts", XDG_CACHE_HOME=f"{folder}/cache")
        done = subprocess.run(
            [sys.executable, "-m", "memory_server", "--memory-path", f"{folder}/memory.jsonl", *options],
            input="".join(json.dumps(line) + "\n" for line in lines).encode(),
            capture_output=True,
            env=env,
            cwd=folder,
            timeout=120,
            check=True,
        )
    answers = {answer.get("id"): answer for answer in map(json.loads, done.stdout.splitlines())}
    return {method: answers[number]["result"] for number, method in enumerate(METHODS, 1)}


def main() -> None:
    LISTS.write_text(json.dumps(sdk_lists(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {LISTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
