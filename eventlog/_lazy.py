"""Package attributes imported on first use (PEP 562), for packages whose parts are heavy.

`search` and `capability` re-export names from submodules that import pydantic-ai and numpy.
Importing one light part (say `search.analyzers`, as the command line does) should not pay for
the rest, so the package resolves a name only when it is first read, and keeps it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ['lazy_exports']


def lazy_exports(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` for the names `where` maps to their submodules.

    `namespace` is the package's `globals()`: a resolved name is stored there, so the next
    read does not come back here.
    """
    package = namespace['__name__']

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        value: object = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
