"""Typed errors raised by the event log.

Every error a caller can cause is an `EventLogError`, so an application can catch one
class; the subclasses say what went wrong. Nothing committed before an error is ever
lost: a failed call changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    'AmbiguousIdError',
    'CheckpointAheadError',
    'CheckpointError',
    'CheckpointFormatError',
    'CheckpointSignatureError',
    'ConversationNotFound',
    'ConversationShreddedError',
    'CorruptEntryError',
    'CorruptStoreError',
    'DestinationError',
    'DurableDeterminismError',
    'DurableError',
    'DurableRunFailedError',
    'EncryptionError',
    'EncryptionSetupError',
    'EventLogError',
    'InvalidArgumentError',
    'InvalidPayloadError',
    'KeyFileError',
    'KeyMissingError',
    'LogClosedError',
    'LogFullError',
    'MissingExtraError',
    'NotFoundError',
    'PayloadMovedError',
    'ReadOnlyStoreError',
    'RevisionConflict',
    'RunLeaseError',
    'RunNotFound',
    'StorageError',
    'StoreBusyError',
    'StoreConnectionError',
    'StoreLocationError',
    'StoreReplacedError',
    'StoreVersionError',
    'UnsealedPayloadError',
    'VectorIndexMismatch',
    'WrongKeyError',
]


class EventLogError(Exception):
    """Base class of every error the event log raises."""


class InvalidArgumentError(EventLogError, ValueError):
    """An id, kind, option or other argument is not acceptable; nothing was written."""


class InvalidPayloadError(InvalidArgumentError):
    """A payload is not bytes, or a message payload is not one pydantic-ai message."""


class NotFoundError(EventLogError, LookupError):
    """A conversation, run or entry the call names does not exist."""


class RevisionConflict(EventLogError):
    """A conversation store's record changed since it was read (saved, deleted or created by
    another writer), or the entry a save continues from is gone; nothing was written.

    `capability.EventLogConversationStore` raises pydantic-ai's `ConversationConflict` for it.
    """

    def __init__(self, conversation_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f'conversation {conversation_id!r}: {reason}')


class ConversationNotFound(NotFoundError):
    """No conversation with this id exists in the log."""


class RunNotFound(NotFoundError):
    """No run with this id exists in the log."""


class StoreLocationError(EventLogError):
    """The store's path cannot hold a store: it is a file, or not readable and writable."""


class DestinationError(EventLogError):
    """An export destination cannot be written: a directory, a socket, a symlink to nothing,
    or a path this process may not write."""


class ReadOnlyStoreError(EventLogError):
    """The store is open read-only (asked for, or found write-protected: a read-only file system,
    files or a directory this process may not write, a database role without write privileges):
    every read works, and a call that would write raises this and writes nothing."""


class StoreBusyError(EventLogError):
    """The operation needs the store to itself (`compact`), but another handle or process has it open."""


class StoreVersionError(EventLogError):
    """The store was written in a format this version does not understand (a newer one)."""


class StorageError(EventLogError):
    """The storage engine failed (disk full, I/O error, lock table full); nothing was committed."""


class StoreReplacedError(StorageError):
    """The store's data file was replaced by another file while this handle had it open (a
    compaction that did not hold the store lock, a backup restored over it): nothing was written
    through this handle; close it and open the store again."""


class StoreConnectionError(StorageError):
    """A PostgreSQL store cannot be reached, or refused the connection (wrong address, user or password)."""


class CorruptEntryError(EventLogError):
    """An entry's stored bytes cannot be decoded; `verify` names such entries."""


class LogClosedError(EventLogError):
    """The log was closed; open a new one to continue."""


class LogFullError(EventLogError):
    """The log has assigned every `seq` up to `MAX_SEQ`; nothing more can be appended to it."""


class CorruptStoreError(EventLogError):
    """The store's own records, indexes or file are damaged (a record or index key cannot be
    decoded, or the LMDB file is truncated or malformed); `verify` names what is wrong."""


class AmbiguousIdError(InvalidArgumentError):
    """An abbreviated id (a prefix) names more than one run or conversation; give more of it."""


class MissingExtraError(EventLogError, ImportError):
    """A feature needs an optional package that is not installed (the message names the extra)."""


class VectorIndexMismatch(EventLogError):
    """A store's vector index was built with another embedding model (or dimension); rebuild it to switch."""


class CheckpointError(EventLogError):
    """Base class of the errors about signed checkpoints and their keys (docs/audit.md)."""


class CheckpointFormatError(CheckpointError, InvalidArgumentError):
    """A checkpoint file or line is not a well-formed checkpoint (cut short, edited, or not one at all)."""


class CheckpointSignatureError(CheckpointError):
    """A checkpoint's signature is malformed, was made by another key, or does not match its content."""


class CheckpointAheadError(CheckpointError):
    """A checkpoint covers entries the store never reached: its latest entries are missing, or the
    checkpoint belongs to another store."""


class KeyFileError(CheckpointError, InvalidArgumentError):
    """A key file is missing, unreadable, not a PEM Ed25519 key, or the wrong half of a key pair."""


class DurableError(EventLogError):
    """A durable run (`capability.EventLogDurability`) cannot go on from its journal in the log."""


class DurableDeterminismError(DurableError):
    """A re-executed run asked for another durable unit than its journal holds at that step, or
    for the same unit with another input (the code, the prompt or the tools changed since the run
    was journaled)."""

    def __init__(self, run_id: str, step: int, journaled: str, requested: str, changed: str | None = None) -> None:
        if changed is None:
            detail = f'the journal holds {journaled!r}, the run now asks for {requested!r}'
        else:
            detail = f'the input to {requested!r} changed: its {changed} differ from those journaled for {journaled!r}'

        super().__init__(f'run {run_id!r} diverged from its journal at step {step}: {detail}')
        self.run_id = run_id
        self.step = step
        self.journaled = journaled
        self.requested = requested
        self.changed = changed
        """What differs when the operation is the same (`'messages'`, `'model settings'`, `'arguments'`);
        `None` when the operations differ."""


class RunLeaseError(DurableError):
    """Another execution holds the lease of the run (only one may execute a run at a time), or
    this execution's lease was taken over: it may append nothing more to the run.

    `held_until` is when the other holder's lease expires unless renewed (a UTC datetime; `None`
    when this execution lost its lease): a holder that crashed is taken over from then on.
    """

    def __init__(self, message: str, *, run_id: str | None = None, held_until: datetime | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.held_until = held_until


class DurableRunFailedError(DurableError):
    """The run ended failed or cancelled, so resuming it cannot return a result."""


class EncryptionError(EventLogError):
    """Base class of the errors about an encrypted store and its keys (docs/encryption.md)."""


class EncryptionSetupError(EncryptionError, InvalidArgumentError):
    """A store and its key provider do not fit: an encrypted store opened for writing without
    one, a plain store holding entries opened with one, or a keyring that cannot be used."""


class KeyMissingError(EncryptionError):
    """A payload of an encrypted store was read without the key that opens it: the store was
    opened without a key provider, or the provider does not hold the conversation's data key."""


class WrongKeyError(EncryptionError):
    """A key does not fit: the key-encryption key cannot unwrap a data key, or the data key the
    provider gave is not the one the payload was sealed with."""


class PayloadMovedError(EncryptionError, CorruptEntryError):
    """A sealed payload fails authentication under its entry's identity: it was moved from
    another entry (or another store) or its bytes were altered."""


class UnsealedPayloadError(EncryptionError, CorruptEntryError):
    """A content entry of an encrypted store holds a payload that is not sealed: it was written
    around the seal (an altered store), so it is never read as if it were genuine."""


class ConversationShreddedError(EncryptionError):
    """The conversation was shredded (its data key destroyed): nothing can be appended to it."""
