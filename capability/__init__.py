"""The front doors: pydantic-ai capabilities over the event log, and the command line."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capability.persistence import (
        EventLogPersistence,
        EventLogPersistenceError,
        EventLogPersistenceWarning,
        OnError,
    )
    from capability.search import TOOL_NAME, ConversationSearch, ScopeDefaultWarning, SearchScope

__all__ = [
    'TOOL_NAME',
    'ConversationSearch',
    'EventLogPersistence',
    'EventLogPersistenceError',
    'EventLogPersistenceWarning',
    'OnError',
    'ScopeDefaultWarning',
    'SearchScope',
]

# The names are imported on first use (PEP 562): the `eventlog` command imports
# `capability.cli`, and most of its commands never need pydantic-ai's agent machinery.
_SUBMODULE: dict[str, str] = {
    'EventLogPersistence': 'capability.persistence',
    'EventLogPersistenceError': 'capability.persistence',
    'EventLogPersistenceWarning': 'capability.persistence',
    'OnError': 'capability.persistence',
    'TOOL_NAME': 'capability.search',
    'ConversationSearch': 'capability.search',
    'ScopeDefaultWarning': 'capability.search',
    'SearchScope': 'capability.search',
}


def __getattr__(name: str) -> object:
    """Import the submodule that defines `name` on first access and keep the name here."""
    module = _SUBMODULE.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value: object = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, imported or not yet."""
    return sorted(__all__)
