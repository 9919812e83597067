"""memory-contexts: an MCP memory server (a knowledge graph in JSONL files) with switchable memory contexts."""

__version__ = "0.1.0"
