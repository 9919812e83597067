"""The memory as one self-contained HTML page: the graph library, our script and the graph itself inlined, so the
file opens from disk with no network and can be mailed or archived as it is.

The library is force-graph (canvas 2D, d3-force layout that cools down and stops), vendored from npm into
`page/vendor/`; see `page/NOTICE` for where it came from and how to update it.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from memory_server.graph import KnowledgeGraph, json_line

PAGE = Path(__file__).resolve().parent / "page"
LIBRARY = PAGE / "vendor" / "force-graph.min.js"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render_page(graph: KnowledgeGraph, context: str, path: Path) -> str:
    """The page for `graph`, the memory of context `context` kept in `path`."""
    parts = {
        "title": html.escape(f"Memory: {context}"),
        "heading": html.escape(f"Memory: {context}") + f' <span class="muted">{html.escape(str(path))}</span>',
        "style": _asset("page.css"),
        "data": script_json(page_data(graph, context, path)),
        "library": _inline_script(LIBRARY.read_text(encoding="utf-8")),
        "app": _inline_script(_asset("page.js")),
    }
    # One pass over the template: what is put in (the memory's own text among it) is never searched for a
    # placeholder again, so an observation that mentions {{app}} stays text.
    return _PLACEHOLDER.sub(lambda match: parts[match.group(1)], _asset("page.html"))


def page_data(graph: KnowledgeGraph, context: str, path: Path) -> dict[str, Any]:
    """The graph in the compact shape page.js reads: types by frequency, entities as [name, type, observations],
    relations as [from, to, type] by entity index. Relations to a missing entity are counted, not drawn."""
    entities = graph.entity_list()
    types = [name for name, _ in Counter(e.entity_type for e in entities).most_common()]
    type_index = {name: number for number, name in enumerate(types)}
    index = {entity.name: number for number, entity in enumerate(entities)}
    relations = []
    missing = 0
    for relation in graph.relations.values():
        source, target = index.get(relation.source), index.get(relation.target)
        if source is None or target is None:
            missing += 1
            continue
        relations.append([source, target, relation.relation_type])
    return {
        "context": context,
        "path": str(path),
        "types": types,
        "entities": [[e.name, type_index[e.entity_type], e.observations] for e in entities],
        "relations": relations,
        "missing": missing,
    }


def script_json(data: Any) -> str:
    """JSON safe inside <script type="application/json">: '<', '>' and '&' escaped, so no text in the memory
    (say an observation holding '</script>') can end the element or open a comment."""
    text = json_line(data)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _inline_script(code: str) -> str:
    # Inside a JavaScript string or regex "<\/script" means the same as "</script" but does not end the element.
    return re.sub("</(script)", r"<\\/\1", code, flags=re.IGNORECASE)


@cache
def _asset(name: str) -> str:
    return (PAGE / name).read_text(encoding="utf-8")
