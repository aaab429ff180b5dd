"""pydantic-ai-eventlog's substrate: an append-only, crash-safe entry log with exact replay."""

from typing import TYPE_CHECKING

from eventlog.entries import (
    MAX_SEQ,
    CompactionInfo,
    ConversationRecord,
    Entry,
    ForkInfo,
    Kind,
    NewEntry,
    RunFinishedInfo,
    RunRecord,
    RunStartedInfo,
    RunStatus,
    TitleInfo,
    ToolEffectInfo,
    VerifyProblem,
    VerifyReport,
    compaction_entry,
    decode_messages,
    encode_message,
    message_entry,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
)
from eventlog.errors import (
    ConversationNotFound,
    CorruptEntryError,
    CorruptStoreError,
    EventLogError,
    InvalidArgumentError,
    InvalidPayloadError,
    LogClosedError,
    LogFullError,
    NotFoundError,
    RunNotFound,
    StorageError,
    StoreConnectionError,
    StoreLocationError,
    StoreVersionError,
)
from eventlog.lmdb_log import LmdbEventLog
from eventlog.log import Appended, EventLog, EventLogBase
from eventlog.memory import InMemoryEventLog
from eventlog.replay import ReplayHistorySource

if TYPE_CHECKING:
    from eventlog.postgres_log import PostgresEventLog


def __getattr__(name: str) -> object:
    # `PostgresEventLog` needs the `postgres` extra (psycopg); it is imported on first use only.
    if name == 'PostgresEventLog':
        from eventlog.postgres_log import PostgresEventLog

        globals()[name] = PostgresEventLog
        return PostgresEventLog
    raise AttributeError(f"module 'eventlog' has no attribute {name!r}")


__all__ = [
    'MAX_SEQ',
    'Appended',
    'CompactionInfo',
    'ConversationNotFound',
    'ConversationRecord',
    'CorruptEntryError',
    'CorruptStoreError',
    'Entry',
    'EventLog',
    'EventLogBase',
    'EventLogError',
    'ForkInfo',
    'InMemoryEventLog',
    'InvalidArgumentError',
    'InvalidPayloadError',
    'Kind',
    'LmdbEventLog',
    'LogClosedError',
    'LogFullError',
    'NewEntry',
    'NotFoundError',
    'PostgresEventLog',
    'ReplayHistorySource',
    'RunFinishedInfo',
    'RunNotFound',
    'RunRecord',
    'RunStartedInfo',
    'RunStatus',
    'StorageError',
    'StoreConnectionError',
    'StoreLocationError',
    'StoreVersionError',
    'TitleInfo',
    'ToolEffectInfo',
    'VerifyProblem',
    'VerifyReport',
    'compaction_entry',
    'decode_messages',
    'encode_message',
    'message_entry',
    'run_finished_entry',
    'run_started_entry',
    'tool_effect_entry',
]
