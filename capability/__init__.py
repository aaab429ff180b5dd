"""The front doors: pydantic-ai capabilities that record runs in the event log, search them and make them durable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventlog._lazy import lazy_exports

if TYPE_CHECKING:
    from capability.conversation_store import EventLogConversationStore
    from capability.durability import EventLogDurability
    from capability.persistence import (
        EventLogPersistence,
        EventLogPersistenceError,
        EventLogPersistenceWarning,
        OnError,
        RedactionError,
        Redactor,
    )
    from capability.recall import AutoRecall, RecallMode, estimate_tokens
    from capability.rerun import Divergence, RerunReport, UnitView
    from capability.search import TOOL_NAME, ConversationSearch, ScopeDefaultWarning, SearchScope

__all__ = [
    'TOOL_NAME',
    'AutoRecall',
    'ConversationSearch',
    'Divergence',
    'EventLogConversationStore',
    'EventLogDurability',
    'EventLogPersistence',
    'EventLogPersistenceError',
    'EventLogPersistenceWarning',
    'OnError',
    'RecallMode',
    'RedactionError',
    'Redactor',
    'RerunReport',
    'ScopeDefaultWarning',
    'SearchScope',
    'UnitView',
    'estimate_tokens',
]

# The names are imported on first use (PEP 562): the `eventlog` command imports
# `eventlog_cli.commands`, and most of its commands never need pydantic-ai's agent machinery.
_SUBMODULE: dict[str, str] = {
    'EventLogConversationStore': 'capability.conversation_store',
    'EventLogDurability': 'capability.durability',
    'AutoRecall': 'capability.recall',
    'RecallMode': 'capability.recall',
    'estimate_tokens': 'capability.recall',
    'EventLogPersistence': 'capability.persistence',
    'EventLogPersistenceError': 'capability.persistence',
    'EventLogPersistenceWarning': 'capability.persistence',
    'OnError': 'capability.persistence',
    'RedactionError': 'capability.persistence',
    'Redactor': 'capability.persistence',
    'Divergence': 'capability.rerun',
    'RerunReport': 'capability.rerun',
    'UnitView': 'capability.rerun',
    'TOOL_NAME': 'capability.search',
    'ConversationSearch': 'capability.search',
    'ScopeDefaultWarning': 'capability.search',
    'SearchScope': 'capability.search',
}


__getattr__, __dir__ = lazy_exports(globals(), _SUBMODULE)
