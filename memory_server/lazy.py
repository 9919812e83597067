"""Modules imported at their first use rather than at start-up.

numpy takes about a tenth of a second to import and is needed only once a search runs; the server should answer
`initialize` (and every call that does not search) without it. `importlib.util.LazyLoader` (standard library) puts
a module object in place whose first attribute access runs the real import.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """`name`, imported now if it already was, else at its first use."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
