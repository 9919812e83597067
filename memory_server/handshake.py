"""The answer to `initialize`, sent before the MCP SDK is imported.

Importing the SDK is most of a start (building its protocol types takes about half a second here, longer than
node takes to start the whole official server), and a client waits for the answer to `initialize` before it asks
anything else. So the server reads the first line itself and, when it is a plain `initialize` request, answers it
as the SDK would (the same capabilities, server info and instructions, and the SDK's choice of protocol version),
then answers what it can while the SDK loads (early.py). The request still goes to the SDK, so the session knows
its client; the SDK's own answer to it is not sent again (stdio.py), and one that differs from ours is logged.
Anything else on the first line (another method, a request the SDK might refuse) waits for the SDK, as it always
did.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from memory_server import __version__
from memory_server.jsonl import json_line

SERVER_NAME = "memory-contexts"
# The SDK's handshake (mcp_types.version): a version from this list that the client asks for is granted, any other
# request gets the newest. What the SDK announces for this server's handlers. tests/test_handshake.py holds both
# to the installed SDK.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CAPABILITIES: dict[str, Any] = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": True},
    "tools": {"listChanged": False},
}
_CLIENT_INFO = {"name", "version", "title", "description", "websiteUrl"}  # all strings
_FIRST_LINE_LIMIT = 1 << 20  # a first line longer than this is left to the SDK


@dataclass(frozen=True)
class EarlyStart:
    """What happened before the SDK was loaded: the bytes read from stdin (the first request and anything after
    it), which the transport reads first, the answer sent to `initialize` (None: nothing was sent), and the
    descriptor of the real stdout once fd 1 was pointed at stderr (early.py; None: fd 1 is still stdout)."""

    read: bytes = b""
    answer: dict[str, Any] | None = None
    output: int | None = None


def answer_initialize(instructions: str, stdin: int = 0, stdout: int = 1) -> EarlyStart:
    """Read the first request from `stdin`; if it is `initialize`, answer it on `stdout` at once."""
    read = _first_line(stdin)
    answer = initialize_answer(read.split(b"\n", 1)[0] if b"\n" in read else b"", instructions)
    if answer is not None:
        data = memoryview((json_line(answer) + "\n").encode("utf-8"))
        while data:
            data = data[os.write(stdout, data) :]
    return EarlyStart(read, answer)


def initialize_answer(line: bytes, instructions: str) -> dict[str, Any] | None:
    """The SDK's answer to `line` if it is an `initialize` request the SDK accepts as it is, else None."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "initialize":
        return None
    request_id, params = message.get("id"), message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)) or not isinstance(params, dict):
        return None
    version, capabilities, client = params.get("protocolVersion"), params.get("capabilities"), params.get("clientInfo")
    if not (isinstance(version, str) and isinstance(capabilities, dict) and isinstance(client, dict)):
        return None
    if not all(isinstance(value, dict) for value in capabilities.values()):
        return None
    if not {"name", "version"} <= client.keys() <= _CLIENT_INFO or not all(isinstance(v, str) for v in client.values()):
        return None
    result = {
        "capabilities": CAPABILITIES,
        "instructions": instructions,
        "protocolVersion": version if version in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
        "serverInfo": {"name": SERVER_NAME, "version": __version__},
    }
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _first_line(fd: int) -> bytes:
    """Bytes from `fd` up to and including the first newline (and whatever the same reads brought after it)."""
    read = bytearray()
    while b"\n" not in read and len(read) < _FIRST_LINE_LIMIT:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        read += chunk
    return bytes(read)
