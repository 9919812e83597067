"""A tool as this server publishes and runs it: the SDK's tool with lean schemas, results not checked a second
time, and failures that read as sentences: argument errors field by field, a crash that says what happened."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from memory_server import present
from memory_server.errors import echo
from memory_server.models import lean_schema

logger = logging.getLogger(__name__)


def make_tool(fn: Callable[..., Any], title: str, description: str, annotations: ToolAnnotations) -> Tool:
    tool = _Tool.from_function(fn, title=title, description=description, annotations=annotations)
    # Every chat pays for the tool list: schemas as lean as they can be, items' properties in place as in the
    # official server's.
    tool.parameters = lean_schema(tool.parameters)
    if tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = lean_schema(tool.fn_metadata.output_schema)
    # The schema stays published; the SDK's check of each result against it is dropped: our results are built
    # from the models the schema comes from, and checking a large graph again cost more than building it.
    tool.fn_metadata.output_model = None
    return tool


class _Tool(Tool):
    """A tool whose argument errors say, field by field, what was wrong (instead of pydantic's report), and whose
    crashes say what happened (instead of only "Error executing tool")."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as problem:
            cause = problem.__cause__
            if isinstance(cause, ValidationError):
                text = present.argument_problems(self.name, cause.errors())
            elif isinstance(problem, UnexpectedToolError) and cause is not None:  # a bug of ours
                logger.error("%s crashed", self.name, exc_info=cause)
                text = (
                    f"{self.name} failed on an unexpected error ({type(cause).__name__}: {echo(str(cause))}); this is "
                    "a bug in the memory server, whose log on stderr has the details. Check the arguments for unusual "
                    "characters, and read the memory before retrying a change."
                )
            else:
                raise
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
