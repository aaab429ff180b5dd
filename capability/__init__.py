"""The front doors: pydantic-ai capabilities over the event log, and the command line."""

from capability.persistence import EventLogPersistence, EventLogPersistenceError, EventLogPersistenceWarning, OnError
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
