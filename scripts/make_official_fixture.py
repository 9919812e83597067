"""Write tests/fixtures/official-memory.jsonl with the real official memory server, for the import tests.

The tests must not need the network, so the file is made once with this script and committed. It installs the
pinned `@modelcontextprotocol/server-memory` with npm (as bench/vs_upstream.py does), drives it over stdio with
the MCP Python SDK, and copies the file the server wrote. Run from the repository root:

    .venv/bin/python scripts/make_official_fixture.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "official-memory.jsonl"


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("vs_upstream", ROOT / "bench" / "vs_upstream.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["vs_upstream"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# What a user's assistant typically stored: people, projects, non-ASCII text, quotes and markup in observations,
# an entity named twice in one batch (older official versions stored it twice), relations both ways.
CALLS = [
    (
        "create_entities",
        {
            "entities": [
                {"name": "Ann Lee", "entityType": "person", "observations": ["pays rent on the 1st", "likes hiking"]},
                {"name": "Shop", "entityType": "project", "observations": ["online shop in Python", 'says "hi"']},
                {"name": "Zoë", "entityType": "person", "observations": ["lives in Zürich", "日本語を話す"]},
                {"name": "Notes", "entityType": "document", "observations": ["</script><script>alert(1)</script>"]},
            ]
        },
    ),
    ("create_relations", {"relations": [{"from": "Ann Lee", "to": "Shop", "relationType": "works on"}]}),
    ("create_relations", {"relations": [{"from": "Zoë", "to": "Ann Lee", "relationType": "knows"}]}),
    ("create_relations", {"relations": [{"from": "Shop", "to": "Notes", "relationType": "documented in"}]}),
    ("add_observations", {"observations": [{"entityName": "Shop", "contents": ["deployed on Fridays"]}]}),
    ("delete_observations", {"deletions": [{"entityName": "Ann Lee", "observations": ["likes hiking"]}]}),
]


async def drive(entry: Path, memory: Path) -> None:
    params = StdioServerParameters(command="node", args=[str(entry)], env={"MEMORY_FILE_PATH": str(memory)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for tool, arguments in CALLS:
            result = await session.call_tool(tool, arguments)
            if result.is_error:
                raise SystemExit(f"{tool} failed: {result.content}")


def main() -> None:
    bench = _bench()
    with tempfile.TemporaryDirectory() as folder:
        entry = bench.ensure_upstream(Path(folder) / "upstream", timeout=600)  # type: ignore[attr-defined]
        memory = Path(folder) / "memory.jsonl"
        asyncio.run(drive(entry, memory))
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(memory, FIXTURE)
    print(f"Wrote {FIXTURE} with {bench.UPSTREAM_PACKAGE}@{bench.UPSTREAM_VERSION}:")  # type: ignore[attr-defined]
    print(FIXTURE.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
