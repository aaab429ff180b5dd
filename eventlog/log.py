"""The `EventLog` protocol and the behaviour every backend shares.

A backend only says how to run a function inside a read or a write transaction
(`_read_sync`, `_write_sync`); everything else (validation, records, replay,
management, export, verification) lives in the engine (`_engine` gathers it) and is identical for all
backends. Short calls run inline; bulk work (long replays, exports, imports,
verification, deletes) runs in a worker thread so the event loop never waits on it.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from functools import partial
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, ClassVar, Protocol, Self, TypeVar, cast, runtime_checkable

from eventlog import _convstore as convstore
from eventlog import _engine as engine
from eventlog import _erase as erasure
from eventlog import _ids as ids
from eventlog import _lease as leases
from eventlog import _stream as stream
from eventlog._files import open_destination
from eventlog._ids import IdKind
from eventlog._storage import ReadTxn, WriteTxn
from eventlog._threads import to_thread
from eventlog.encryption import (
    KeyProvider,
    SealedTxn,
    Sealer,
    encrypt_entries,
    erased_placeholders_sealed,
    mark_encrypted,
    read_store_id,
    seal_erased_placeholders,
)
from eventlog.entries import (
    ConversationRecord,
    Entry,
    NewEntry,
    RunLease,
    RunRecord,
    RunStatus,
    SavedInfo,
    ShredInfo,
    TitleInfo,
    VerifyReport,
    encode_info,
)
from eventlog.errors import (
    ConversationNotFound,
    EncryptionSetupError,
    EventLogError,
    InvalidArgumentError,
    LogClosedError,
    ReadOnlyStoreError,
    RunNotFound,
)

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from eventlog._memory_projection import MemoryProjections
    from eventlog.checkpoint import Checkpoint, CheckpointSource, PublicKeySource, SignerSource
    from eventlog.projection import LogReader, ProjectionRecords, ProjectionSpec, ProjectionWriter
    from eventlog.retention import RetentionPolicy, RetentionReport

__all__ = ['Appended', 'EventLog', 'EventLogBase']

T = TypeVar('T')

_BULK_THRESHOLD = 2000

_RUN_STATUSES: tuple[RunStatus, ...] = ('running', 'completed', 'failed', 'cancelled')
"""Replays longer than this many entries run in a worker thread."""
_DECODE_BATCH = 1000
"""Messages decoded per pydantic-ai call when a whole record is decoded (bounds the joined JSON)."""
STREAM_BATCH = 500
"""Default number of items per list the `iter_*` methods yield."""
STREAM_BYTES = 2 * 1024 * 1024
"""Payload bytes after which a list the `iter_*` methods yield ends early (it holds at least one
item), so that a batch of large messages stays small too."""
_MESSAGE_KINDS = frozenset({'message'})


class Appended(list[int]):
    """The `seq`s one `append_many` call assigned, in order, plus what was there before.

    `recorded` maps the index of each entry whose idempotency key had been appended before (a
    step executed again) to the payload the log holds for it, which can differ from the payload
    just offered (a request rebuilt with a new timestamp). Entries appended now are absent.
    """

    recorded: dict[int, bytes]

    def __init__(self, seqs: Iterable[int], recorded: dict[int, bytes]) -> None:
        """Wrap `seqs` with the `recorded` payloads of idempotent repeats."""
        super().__init__(seqs)
        self.recorded = recorded


@runtime_checkable
class EventLog(Protocol):
    """An append-only log of agent entries, keyed by conversation and run."""

    async def append(self, entry: NewEntry) -> int:
        """Append one entry in its own transaction; return its `seq`."""
        ...

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        """Append entries in order in one transaction (all or none); return their `seq`s."""
        ...

    async def last_seq(self) -> int:
        """The largest `seq` in the log (0 when empty)."""
        ...

    async def get_entry(self, seq: int) -> Entry | None:
        """One entry by `seq`, or `None`."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None:
        """A run's record, or `None`."""
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation's record, or `None` (also for a deleted one)."""
        ...

    async def list_runs(
        self, *, conversation_id: str | None = None, parent_run_id: str | None = None, status: RunStatus | None = None
    ) -> list[RunRecord]:
        """Runs in start order, optionally of one conversation, one parent run or one status
        (`status='running'`: the runs that have not finished, interrupted ones included)."""
        ...

    async def list_conversations(self, *, include_archived: bool = False) -> list[ConversationRecord]:
        """Conversations in creation order; archived ones only when asked."""
        ...

    async def run_messages(self, run_id: str) -> list[ModelMessage]:
        """The run's full record: what it inherited, then what it added."""
        ...

    async def run_messages_json(self, run_id: str) -> bytes:
        """`run_messages` as the exact bytes `ModelMessagesTypeAdapter.dump_json` gives for it."""
        ...

    async def transcript(self, conversation_id: str) -> list[ModelMessage]:
        """Every original message of the conversation once, in order."""
        ...

    async def context(self, conversation_id: str) -> list[ModelMessage]:
        """What an agent continuing the conversation starts from (compaction summaries folded in);
        `[]` for a conversation the log does not hold."""
        ...

    async def entries(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        kinds: Iterable[str] | None = None,
        after_seq: int = 0,
        limit: int | None = None,
    ) -> list[Entry]:
        """Entries in `seq` order, filtered; `after_seq` lets a follower resume."""
        ...

    async def branch(self, tip: int) -> list[Entry]:
        """Every entry on the branch ending at `tip`, oldest first."""
        ...

    async def fork(
        self, conversation_id: str, *, at_seq: int | None = None, new_conversation_id: str | None = None
    ) -> str:
        """Start a new conversation whose history is this one's up to `at_seq`; return its id."""
        ...

    async def set_title(self, conversation_id: str, title: str) -> int:
        """Give a conversation a title."""
        ...

    async def archive(self, conversation_id: str) -> int:
        """Hide a conversation from listings (its entries stay)."""
        ...

    async def unarchive(self, conversation_id: str) -> int:
        """Show an archived conversation in listings again."""
        ...

    async def delete_conversation(self, conversation_id: str) -> int:
        """Remove a conversation's entries for good, leaving a tombstone; return how many were removed."""
        ...

    async def export(
        self, destination: str | Path | IO[bytes], *, conversation_ids: Sequence[str] | None = None
    ) -> int:
        """Write entries as JSON Lines; return how many entries were written."""
        ...

    async def import_(self, source: str | Path | IO[bytes], *, allow_version_1: bool = False) -> int:
        """Read an export into this log (all or nothing); return how many entries were written."""
        ...

    async def verify(self) -> VerifyReport:
        """Walk every hash chain and report the first bad entry of each conversation."""
        ...

    def close(self) -> None:
        """Release the log's resources; later calls raise `LogClosedError`."""
        ...


class EventLogBase(ABC):
    """The `EventLog` API on top of two transaction primitives."""

    _closed: bool = False
    lease_clock: Callable[[], float] = time.time
    """The wall clock (seconds since the epoch) this handle takes and renews run leases by: a lease
    lapses when this clock passes its `expires`. `time.time` unless replaced (tests set a clock
    they move forward, to let a lease lapse without waiting for it)."""
    persistent: ClassVar[bool] = False
    """Whether the store outlives the process (LMDB, PostgreSQL): searches over it then use the
    persistent index kept in the store rather than indexing in memory per search."""

    @abstractmethod
    def _read_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        """Run `fn` in a read transaction."""

    @abstractmethod
    def _write_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run `fn` in a write transaction that commits when it returns and aborts when it raises."""

    @abstractmethod
    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with a projection's records and the log in one read transaction (`eventlog.projection`)."""

    @abstractmethod
    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one write transaction: the projection's writes and position commit together."""

    @abstractmethod
    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store."""

    @abstractmethod
    def disk_size(self) -> int:
        """Bytes the store takes in its storage, as `eventlog stats` reports them (`disk_bytes`).

        LMDB: the blocks allocated to its data file (`data.mdb`), free pages included; PostgreSQL:
        `pg_total_relation_size` of every table in the log's schema (their indexes and TOAST
        included); in memory: 0, since nothing is on disk. A cheap synchronous call that reads no
        entries, so it is not a measure of the live data (LMDB's `compact` gives free pages back)."""

    read_only_reason: str | None = None
    """Why this handle is read-only (`'opened read-only as asked'`, `'its file system is read-only'`,
    ...); `None` when it may write. A read-only handle answers every read and raises
    `ReadOnlyStoreError` for every call that would write."""

    @property
    def read_only(self) -> bool:
        """Whether this handle refuses writes (see `read_only_reason`)."""
        return self.read_only_reason is not None

    def _store_name(self) -> str:
        """How a message names this store."""
        return 'the store'

    def _refuse_write(self) -> None:
        """Raise `ReadOnlyStoreError` when this handle is read-only; called before anything is written."""
        if self.read_only_reason is not None:
            raise ReadOnlyStoreError(
                f'{self._store_name()} is open read-only ({self.read_only_reason}); nothing was written'
            )

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f'{type(self).__name__} is closed')

    # -- encryption ---------------------------------------------------------------------------

    _sealer: Sealer | None = None
    """The sealing state of an encrypted store (`eventlog.encryption`); `None` for a plain one."""

    @property
    def encrypted(self) -> bool:
        """Whether the store is encrypted (its content payloads sealed under per-conversation keys)."""
        return self._sealer is not None

    @property
    def store_id(self) -> str | None:
        """An encrypted store's id (part of every sealed payload's associated data); `None` when plain."""
        return None if self._sealer is None else self._sealer.store_id

    def _setup_encryption(self, keys: KeyProvider | None) -> None:
        """Read whether the store is encrypted and fit it with `keys` (called by each backend as it
        opens, before anything else reads). An empty store opened with `keys` becomes encrypted."""
        if keys is not None and not isinstance(keys, KeyProvider):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(f'keys must be a KeyProvider (e.g. FileKeyProvider), got {type(keys).__name__}')
        store_id = self._read_sync(read_store_id)
        if store_id is None and keys is not None:
            if self.read_only_reason is not None:
                raise EncryptionSetupError(f'{self._store_name()} is not encrypted; it was opened read-only with keys')

            def create(txn: WriteTxn) -> str:
                if engine.last_seq(txn) != 0:
                    raise EncryptionSetupError(
                        f'{self._store_name()} is a plain store holding entries; migrate it with: eventlog encrypt'
                    )
                return read_store_id(txn) or mark_encrypted(txn)

            store_id = self._write_sync(create)
        if store_id is None:
            return
        if keys is None and self.read_only_reason is None:
            raise EncryptionSetupError(
                f'{self._store_name()} is encrypted: open it with keys=... to write (or read-only, to read '
                'records and verify without keys)'
            )
        sealer = self._sealer = Sealer(store_id, keys)
        if keys is not None and self.read_only_reason is None and not self._read_sync(erased_placeholders_sealed):
            self._write_sync(lambda txn: seal_erased_placeholders(txn, sealer))  # once, for an older store
        self._keep_projections_in_memory()

    async def encrypt(self, keys: KeyProvider) -> int:
        """Make this plain store encrypted (`eventlog encrypt`, docs/encryption.md): every content
        payload sealed under a new data key of its conversation held by `keys`, every chain
        recomputed over the sealed bytes, in one write transaction (all or nothing: on any error the
        store is unchanged). Then projections are cleared and the store's files rewritten (`scrub`)
        so the clear payloads leave them; a rewrite that cannot be done now stays pending, as after
        `erase`. Returns how many payloads were sealed.

        Signed checkpoints made before no longer match the recomputed chains: make a new one.
        Raises `EncryptionSetupError` when the store is encrypted already.
        """
        if not isinstance(keys, KeyProvider):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(f'keys must be a KeyProvider (e.g. FileKeyProvider), got {type(keys).__name__}')
        self._check_open()
        self._refuse_write()
        if self._sealer is not None:
            raise EncryptionSetupError(f'{self._store_name()} is encrypted already')
        if not self.persistent:
            raise EncryptionSetupError('an in-memory store keeps nothing at rest: there is nothing to encrypt')

        def work() -> int:
            from eventlog.projection import CataloguedStore

            store_id, sealed = self._write_sync(lambda txn: encrypt_entries(txn, keys))
            if isinstance(self, CataloguedStore):  # an index at rest holds the clear text: dropped
                for name in sorted(self.present_projections()):
                    self.clear_projection(name)
            pending = self._read_sync(engine.scrub_pending)
            try:
                problem = self._rewrite_sync()
            except EventLogError as exc:
                problem = str(exc)
            if problem is None and pending is not None:
                self._write_sync(lambda txn: engine.clear_scrub_pending(txn, pending))
            self._sealer = Sealer(store_id, keys)
            self._keep_projections_in_memory()
            return sealed

        return await to_thread(work)

    _memory_projections: MemoryProjections | None = None
    """An encrypted store's projections (the search and vector indexes), kept in this process's
    memory only: nothing derived from its content is ever written at rest (docs/encryption.md)."""

    def _memory_projection(
        self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T], *, write: bool
    ) -> T:
        """Run `fn` with an encrypted store's in-memory projection `spec` and the log read through
        the seal, in one read transaction of the log; a write that raises is undone."""
        from eventlog.projection import LogReader

        projections, sealer = self._memory_projections, self._sealer
        assert projections is not None
        assert sealer is not None
        with self._memory_lock:
            txn = projections.begin(spec.name)

            def run(log_txn: ReadTxn) -> T:
                return fn(txn, LogReader(cast('ReadTxn', SealedTxn(log_txn, sealer))))

            try:
                return self._read_sync(run)
            except BaseException:
                if write:
                    txn.rollback()
                raise

    def _keep_projections_in_memory(self) -> None:
        from eventlog._memory_projection import MemoryProjections

        self._memory_lock = threading.RLock()
        self._memory_projections = MemoryProjections()

    def _sealed(self, fn: Callable[[SealedTxn], T]) -> Callable[[ReadTxn], T]:
        """`fn` reading through the seal of an encrypted store (`SealedTxn`); unchanged when plain."""
        sealer = self._sealer
        if sealer is None:
            return cast('Callable[[ReadTxn], T]', fn)
        return lambda txn: fn(SealedTxn(txn, sealer))

    async def _read(self, fn: Callable[[ReadTxn], T], *, bulk: bool = False, views: bool = False) -> T:
        self._check_open()
        fn = self._sealed(fn)
        read = self._read_views_sync if views and self._sealer is None else self._read_sync  # sealed: opened whole
        if bulk:
            return await to_thread(read, fn)
        return read(fn)

    def _read_views_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        """`_read_sync`, where the ENTRIES values `fn` reads may be views of the store's memory
        (LMDB's map) rather than copies: valid only inside `fn`, which must return none of them."""
        return self._read_sync(fn)

    async def _write(self, fn: Callable[[WriteTxn], T], *, bulk: bool = False) -> T:
        self._check_open()
        self._refuse_write()
        fn = cast('Callable[[WriteTxn], T]', self._sealed(fn))
        if bulk:
            return await to_thread(self._write_sync, fn)
        return self._write_sync(fn)

    # -- appending ----------------------------------------------------------------------------

    async def append(self, entry: NewEntry) -> int:
        """Append one entry in its own transaction; return its `seq`."""
        fence = self._fence()
        return (await self._write(lambda txn: engine.append_entries(txn, [entry], fence=fence)))[0]

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        """Append entries in order in one transaction (all or none); return their `seq`s.

        The list returned is an `Appended`, which also tells which entries had been appended
        before (their idempotency key was already recorded) and what the log holds for them.
        """
        batch = list(entries)
        if not batch:
            return Appended([], {})
        held: dict[int, bytes] = {}
        fence = self._fence()

        def write(txn: WriteTxn) -> list[int]:
            held.clear()  # a transaction retried after the map grew starts over
            return engine.append_entries(txn, batch, recorded=held, fence=fence)

        return Appended(await self._write(write, bulk=len(batch) > _BULK_THRESHOLD), dict(held))

    # -- run leases ---------------------------------------------------------------------------

    def _fence(self) -> RunLease | None:
        """The lease this task's appends to this log are made under (`run_lease_fence`), if any."""
        fence = leases.FENCE.get()
        return fence[1] if fence is not None and fence[0] is self else None

    async def take_run_lease(self, run_id: str, owner: str, seconds: float, *, executor: str | None = None) -> RunLease:
        """Take the lease of run `run_id` for the execution `owner` (unique per execution) for
        `seconds`, in a write transaction of the log; return it (its `epoch` is the fencing token
        with `owner`).

        The lease is taken when no one holds it, when its holder's lease lapsed by this
        handle's clock (`lease_clock`; then `epoch` grows by one), or when `owner` holds it already. Otherwise
        `RunLeaseError`, whose `held_until` says when the holder's lease lapses unless renewed.
        No process id or host name is consulted: a holder that died is taken over once its lease
        lapses. Holders' clocks are assumed to agree within a bound well below `seconds`.

        `executor` names the process the execution runs in, by an id that persists across its
        restarts and that no other live process uses: a lease held by another execution of the
        same executor (the process before a restart) is taken over at once (`epoch` grows by one,
        so that execution, if it still runs, is fenced).
        """
        leases.check_args(run_id, owner, seconds, executor)
        return await self._write(
            lambda txn: leases.take_lease(txn, run_id, owner, float(seconds), self.lease_clock(), executor)
        )

    async def renew_run_lease(self, lease: RunLease, seconds: float) -> RunLease:
        """Make `lease` last `seconds` from now; `RunLeaseError` if the store no longer holds it
        (another execution took it over, or it was released)."""
        leases.check_args(lease.run_id, lease.owner, seconds)
        return await self._write(lambda txn: leases.renew_lease(txn, lease, float(seconds), self.lease_clock()))

    async def release_run_lease(self, lease: RunLease) -> bool:
        """Drop `lease` if the store still holds it (whether it did): the run may be taken at once."""
        return await self._write(lambda txn: leases.release_lease(txn, lease))

    async def get_run_lease(self, run_id: str) -> RunLease | None:
        """The lease of run `run_id` the store holds (lapsed or not), or `None`."""
        engine.check_id(run_id, 'run_id')
        return await self._read(lambda txn: leases.get_lease(txn, run_id))

    @contextmanager
    def run_lease_fence(self, lease: RunLease) -> Generator[None]:
        """Within this block (and the tasks and threads started from it), every append to this
        log checks in its own transaction that the store still holds `lease`: once another
        execution took the lease over, the append raises `RunLeaseError` and writes nothing.
        Appends through other handles, even on the same store, are not fenced."""
        token = leases.FENCE.set((self, lease))
        try:
            yield
        finally:
            leases.FENCE.reset(token)

    # -- records ------------------------------------------------------------------------------

    async def last_seq(self) -> int:
        """The largest `seq` in the log (0 when empty)."""
        return await self._read(engine.last_seq)

    async def entry_heads(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        kinds: Iterable[str] | None = None,
        after_seq: int = 0,
        limit: int | None = None,
        payload_limit: int,
    ) -> list[tuple[Entry, int]]:
        """`entries`, each with its payload cut to its first `payload_limit` bytes, and the
        payload's full size: to show big entries without reading them whole. On LMDB only the
        bytes kept are read from the file (an encrypted store opens each payload whole first)."""
        engine.check_count(payload_limit, 'payload_limit')
        kind_set = self._entries_args(conversation_id, run_id, kinds, after_seq, limit)

        def read(txn: ReadTxn) -> list[tuple[Entry, int]]:
            it = engine.iter_entry_heads(
                txn,
                conversation_id=conversation_id,
                run_id=run_id,
                kinds=kind_set,
                after_seq=after_seq,
                payload_limit=payload_limit,
            )
            return list(it if limit is None else islice(it, limit))

        return await self._read(read, bulk=limit is None or limit > _BULK_THRESHOLD, views=True)

    async def get_entry_head(self, seq: int, payload_limit: int) -> tuple[Entry, int] | None:
        """`get_entry` with the payload cut to its first `payload_limit` bytes, and its full size
        (see `entry_heads`); `None` when there is no entry `seq`."""
        engine.check_seq(seq, 'seq')
        engine.check_count(payload_limit, 'payload_limit')
        return await self._read(lambda txn: engine.get_entry_head(txn, seq, payload_limit), views=True)

    async def get_entry(self, seq: int) -> Entry | None:
        """One entry by `seq`, or `None`."""
        engine.check_seq(seq, 'seq')
        return await self._read(lambda txn: engine.get_entry(txn, seq), views=True)

    async def get_run(self, run_id: str) -> RunRecord | None:
        """A run's record, or `None`."""
        engine.check_id(run_id, 'run_id')
        return await self._read(lambda txn: engine.get_run(txn, run_id))

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation's record, or `None` (also for a deleted one)."""
        engine.check_id(conversation_id, 'conversation_id')
        record = await self._read(lambda txn: engine.get_conversation(txn, conversation_id))
        return None if record is None or record.deleted else record

    async def list_runs(
        self, *, conversation_id: str | None = None, parent_run_id: str | None = None, status: RunStatus | None = None
    ) -> list[RunRecord]:
        """Runs in start order, optionally of one conversation, one parent run or one status
        (`status='running'`: the runs that have not finished, interrupted ones included)."""
        if conversation_id is not None:
            engine.check_id(conversation_id, 'conversation_id')
        if parent_run_id is not None:
            engine.check_id(parent_run_id, 'parent_run_id')
        if status is not None and status not in _RUN_STATUSES:
            raise InvalidArgumentError(f'status must be one of {", ".join(_RUN_STATUSES)}, not {status!r}')
        return await self._read(
            lambda txn: engine.list_runs(
                txn, conversation_id=conversation_id, parent_run_id=parent_run_id, status=status
            ),
            bulk=conversation_id is None,
        )

    async def list_conversations(self, *, include_archived: bool = False) -> list[ConversationRecord]:
        """Conversations in creation order; archived ones only when asked."""
        return await self._read(
            lambda txn: engine.list_conversations(txn, include_archived=include_archived), bulk=True
        )

    # -- replay -------------------------------------------------------------------------------

    async def _payloads(self, fn: Callable[[ReadTxn], list[bytes]], size_hint: int) -> list[bytes]:
        return await self._read(fn, bulk=size_hint > _BULK_THRESHOLD)

    async def _run_size(self, run_id: str) -> int:
        engine.check_id(run_id, 'run_id')
        run = await self._read(lambda txn: engine.get_run(txn, run_id))
        return 0 if run is None else run.last_seq - run.start_seq

    async def run_message_payloads(self, run_id: str) -> list[bytes]:
        """Each message of the run's full record as its stored pydantic-ai JSON."""
        size = await self._run_size(run_id)
        return await self._payloads(lambda txn: engine.run_message_payloads(txn, run_id), size)

    async def run_messages(self, run_id: str) -> list[ModelMessage]:
        """The run's full record: what it inherited, then what it added."""
        size = await self._run_size(run_id)

        def read(txn: ReadTxn) -> list[ModelMessage]:
            run = engine.get_run(txn, run_id)
            if run is None:
                raise RunNotFound(f'no run {run_id!r} in this log')
            found = stream.branch_entries(txn, stream.branch_stretches(txn, run.last_seq), _MESSAGE_KINDS)
            return _decode_in_batches(entry.payload for entry in found)

        def work() -> list[ModelMessage]:
            return self._read_sync(self._sealed(read))

        if size > _BULK_THRESHOLD:
            self._check_open()
            return await to_thread(work)
        return work()

    async def run_messages_json(self, run_id: str) -> bytes:
        """`run_messages` as the exact bytes `ModelMessagesTypeAdapter.dump_json` gives for it."""
        return engine.join_payloads(await self.run_message_payloads(run_id))

    async def transcript_payloads(self, conversation_id: str) -> list[bytes]:
        """`transcript` as stored pydantic-ai JSON, one item per message."""
        engine.check_id(conversation_id, 'conversation_id')
        return await self._read(lambda txn: engine.transcript_payloads(txn, conversation_id), bulk=True)

    async def transcript(self, conversation_id: str) -> list[ModelMessage]:
        """Every original message of the conversation once, in order (inherited history first)."""
        return await to_thread(engine.decode_payloads, await self.transcript_payloads(conversation_id))

    async def transcript_json(self, conversation_id: str) -> bytes:
        """`transcript` as the bytes `ModelMessagesTypeAdapter.dump_json` gives for it."""
        return engine.join_payloads(await self.transcript_payloads(conversation_id))

    async def context_payloads(self, conversation_id: str) -> list[bytes]:
        """`context` as stored pydantic-ai JSON, one item per message (`[]` for an unknown conversation)."""
        engine.check_id(conversation_id, 'conversation_id')
        return await self._read(lambda txn: engine.context_payloads(txn, conversation_id), bulk=True)

    async def context(self, conversation_id: str) -> list[ModelMessage]:
        """What an agent continuing the conversation starts from: the record of its latest run
        that is not a sub-agent's (a run started inside another run of the same conversation,
        see `top_level_runs`), with each compaction summary in place of the originals it replaced.

        A conversation the log does not hold (never recorded, or deleted) has none: `[]`, so
        `message_history=await log.context(conversation_id)` starts a new conversation too.
        """
        engine.check_id(conversation_id, 'conversation_id')

        def read(txn: ReadTxn) -> list[ModelMessage]:
            tip = engine.context_tip(txn, conversation_id)
            plan = stream.context_plan(stream.fold_entries(txn, tip))
            return _decode_in_batches(stream.plan_payloads(txn, plan))

        return await self._read(read, bulk=True)

    @staticmethod
    def _entries_args(
        conversation_id: str | None, run_id: str | None, kinds: Iterable[str] | None, after_seq: int, limit: int | None
    ) -> frozenset[str] | None:
        """Check the filters of `entries`; the kinds as a set (`None`: all)."""
        if conversation_id is not None:
            engine.check_id(conversation_id, 'conversation_id')
        if run_id is not None:
            engine.check_id(run_id, 'run_id')
        kind_set = _check_kinds(kinds)
        engine.check_count(after_seq, 'after_seq')
        if limit is not None:
            engine.check_count(limit, 'limit')
        return kind_set

    async def entries(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        kinds: Iterable[str] | None = None,
        after_seq: int = 0,
        limit: int | None = None,
    ) -> list[Entry]:
        """Entries in `seq` order, filtered; `after_seq` lets a follower resume where it stopped."""
        kind_set = self._entries_args(conversation_id, run_id, kinds, after_seq, limit)

        def read(txn: ReadTxn) -> list[Entry]:
            out: list[Entry] = []
            it = engine.iter_entries(
                txn, conversation_id=conversation_id, run_id=run_id, kinds=kind_set, after_seq=after_seq
            )
            for entry in it:
                if limit is not None and len(out) >= limit:
                    break
                out.append(entry)
            return out

        return await self._read(read, bulk=limit is None or limit > _BULK_THRESHOLD)

    async def iter_branch(
        self, tip: int | None, *, kinds: Iterable[str] | None = None, batch: int = STREAM_BATCH
    ) -> AsyncIterator[list[Entry]]:
        """The entries of the branch ending at `tip` (`branch`), oldest first, in lists of at most
        `batch` entries (fewer once their payloads pass `STREAM_BYTES`), each read in its own short
        transaction: memory stays bounded by the batch, not the branch.

        Entries appended after the call starts are not included; a conversation deleted
        meanwhile ends the branch early.
        """
        if tip is not None:
            engine.check_seq(tip, 'tip')
        kind_set = _check_kinds(kinds)
        _check_batch(batch)
        stretches = await self._read(lambda txn: stream.branch_stretches(txn, tip))
        take = partial(_take_branch, stretches=stretches, kinds=kind_set, count=batch)
        async for found in self._batches(take, after=0, bulk=batch > _BULK_THRESHOLD):
            yield found

    async def iter_entries(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        kinds: Iterable[str] | None = None,
        after_seq: int = 0,
        batch: int = STREAM_BATCH,
    ) -> AsyncIterator[list[Entry]]:
        """`entries` in lists of at most `batch` (fewer once their payloads pass `STREAM_BYTES`),
        each read in its own short transaction; it ends at the last entry when it is reached."""
        kind_set = self._entries_args(conversation_id, run_id, kinds, after_seq, None)
        _check_batch(batch)
        take = partial(_take_entries, conversation_id=conversation_id, run_id=run_id, kinds=kind_set, count=batch)
        async for found in self._batches(take, after=after_seq, bulk=batch > _BULK_THRESHOLD):
            yield found

    async def _batches(
        self, take: Callable[..., tuple[list[Entry], bool]], *, after: int, bulk: bool
    ) -> AsyncIterator[list[Entry]]:
        """Batches `take(txn, after=...)` returns, each read in its own transaction, until it says
        there is no more; each batch resumes after the last entry of the one before."""
        while True:
            found, more = await self._read(partial(take, after=after), bulk=bulk)
            if found:
                yield found
            if not more:
                return
            after = found[-1].seq

    async def iter_run_message_payloads(self, run_id: str, *, batch: int = STREAM_BATCH) -> AsyncIterator[list[bytes]]:
        """`run_message_payloads` in lists of at most `batch` (see `iter_branch`)."""
        engine.check_id(run_id, 'run_id')
        run = await self._read(lambda txn: engine.get_run(txn, run_id))
        if run is None:
            raise RunNotFound(f'no run {run_id!r} in this log')
        async for found in self.iter_branch(run.last_seq, kinds=_MESSAGE_KINDS, batch=batch):
            yield [entry.payload for entry in found]

    async def iter_context_payloads(
        self, conversation_id: str, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[list[bytes]]:
        """`context_payloads` in lists of at most `batch` messages (fewer once they pass `STREAM_BYTES`);
        nothing for an unknown conversation.

        The fold of compactions is planned first in one transaction, holding one integer per
        message (and the summaries); the payloads are then read batch by batch.
        """
        engine.check_id(conversation_id, 'conversation_id')
        _check_batch(batch)

        def plan(txn: ReadTxn) -> list[stream.ContextItem]:
            tip = engine.context_tip(txn, conversation_id)
            return stream.context_plan(stream.fold_entries(txn, tip))

        items = await self._read(plan, bulk=True, views=True)
        start = 0
        while start < len(items):
            found, start = await self._read(
                partial(_plan_payloads, plan=items, start=start, count=batch), bulk=batch > _BULK_THRESHOLD
            )
            yield [payload for payload, _ in found]

    async def iter_context_messages(
        self, conversation_id: str, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """`iter_context_payloads` with each message's entry number: `(seq, payload)`, where `seq` is
        the message's own entry, or for the messages of a compaction summary the compaction's entry."""
        async for found in self._context_batches(conversation_id, batch, None):
            yield [(seq, payload) for seq, payload, _ in found]

    async def iter_context_heads(
        self, conversation_id: str, *, payload_limit: int, batch: int = STREAM_BATCH
    ) -> AsyncIterator[list[tuple[int, bytes, int]]]:
        """`iter_context_messages` with each payload cut to its first `payload_limit` bytes and
        its full size: `(seq, payload, size)`. On LMDB only the bytes kept are read from the
        file (see `entry_heads`)."""
        engine.check_count(payload_limit, 'payload_limit')
        async for found in self._context_batches(conversation_id, batch, payload_limit):
            yield found

    async def _context_batches(
        self, conversation_id: str, batch: int, payload_limit: int | None
    ) -> AsyncIterator[list[tuple[int, bytes, int]]]:
        """The context's messages in batches as `(seq, payload, size)`, each payload cut to
        `payload_limit` bytes unless `None` (see `iter_context_messages`)."""
        engine.check_id(conversation_id, 'conversation_id')
        _check_batch(batch)

        def plan(txn: ReadTxn) -> list[tuple[int, stream.ContextItem]]:
            tip = engine.context_tip(txn, conversation_id)
            return stream.numbered_context_plan(stream.fold_entries(txn, tip))

        numbered = await self._read(plan, bulk=True, views=True)
        items = [item for _, item in numbered]
        start = 0
        while start < len(items):
            found, end = await self._read(
                partial(_plan_payloads, plan=items, start=start, count=batch, payload_limit=payload_limit),
                bulk=batch > _BULK_THRESHOLD,
                views=payload_limit is not None,
            )
            seqs = [seq for seq, item in numbered[start:end] for _ in (item if isinstance(item, list) else [item])]
            yield [(seq, payload, size) for seq, (payload, size) in zip(seqs, found, strict=True)]
            start = end

    async def history_origin(self, conversation_id: str) -> int | None:
        """The entry in another conversation this one's history continues from (its fork point,
        or where its first run continued from), or `None`: `iter_branch` of it is the inherited history."""
        engine.check_id(conversation_id, 'conversation_id')
        return await self._read(lambda txn: stream.history_origin(txn, conversation_id))

    async def branch(self, tip: int) -> list[Entry]:
        """Every entry on the branch ending at `tip`, oldest first."""
        engine.check_seq(tip, 'tip')

        def read(txn: ReadTxn) -> list[Entry]:
            return [entry for body in engine.branch_bodies(txn, tip) if (entry := engine.get_entry(txn, body.seq))]

        return await self._read(read, bulk=True)

    # -- management ---------------------------------------------------------------------------

    async def fork(
        self, conversation_id: str, *, at_seq: int | None = None, new_conversation_id: str | None = None
    ) -> str:
        """Start a new conversation whose history is this one's up to `at_seq` (default: its
        latest context), by reference; return the new conversation's id."""
        engine.check_id(conversation_id, 'conversation_id')
        return await self._write(lambda txn: engine.fork(txn, conversation_id, at_seq, new_conversation_id))

    async def set_title(self, conversation_id: str, title: str) -> int:
        """Give a conversation a title; return the `title` entry's `seq`."""
        if not isinstance(title, str) or len(title) > 1000:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError('title must be a string of at most 1000 characters')
        payload = encode_info(TitleInfo(title))
        return await self.append(NewEntry(conversation_id=conversation_id, kind='title', payload=payload))

    async def archive(self, conversation_id: str) -> int:
        """Leave a conversation out of listings (its entries stay); return the entry's `seq`."""
        return await self.append(NewEntry(conversation_id=conversation_id, kind='archived'))

    async def unarchive(self, conversation_id: str) -> int:
        """List an archived conversation again; return the entry's `seq`."""
        return await self.append(NewEntry(conversation_id=conversation_id, kind='unarchived'))

    async def delete_conversation(self, conversation_id: str) -> int:
        """Remove a conversation's entries and derived data for good, leaving a content-free
        tombstone; return how many entries were removed.

        Conversations forked from it keep their own entries but lose the history they
        referenced in it.
        """
        engine.check_id(conversation_id, 'conversation_id')
        return await self._write(lambda txn: engine.delete_conversation(txn, conversation_id), bulk=True)

    # -- erasure and retention ----------------------------------------------------------------

    async def erase(
        self,
        conversation_id: str,
        *,
        run_id: str | None = None,
        where: Callable[[Entry], bool] | None = None,
        reason: str | None = None,
        by: str | None = None,
        scrub: bool = True,
    ) -> erasure.Erased:
        """Remove the content of a conversation's messages and compaction summaries for good,
        keeping each entry's place in the chain (docs/erasure.md).

        Erases the whole conversation, only the entries of `run_id`, and of those only the ones
        `where(entry)` returns `True` for. Each erased entry keeps its `seq`, kind, run, parent,
        timestamp and stored hash and is marked `erased`; replay returns a placeholder message in
        its place. An `erasure` entry records the erased `seq`s, `reason` and `by`. With `scrub`
        (the default), `scrub()` then purges the removed bytes from projections and the store's
        files; the result says whether that succeeded (`scrubbed`, `scrub_error`): a scrub that
        fails never raises, since the erasure is committed by then.

        `where` runs inside the erasing write transaction: it must not call the log.

        Raises `ConversationNotFound`, `RunNotFound` (a run not in this conversation) or
        `InvalidArgumentError` (a bad predicate, reason or id); nothing is erased then.
        """
        engine.check_id(conversation_id, 'conversation_id')
        done = await self._write(
            lambda txn: erasure.erase(txn, conversation_id, run_id=run_id, where=where, reason=reason, by=by),
            bulk=True,
        )
        if done.seqs and scrub:
            problem = await self.scrub()
            return replace(done, scrubbed=problem is None, scrub_error=problem)
        return done

    # -- the conversation store (capability.EventLogConversationStore) --------------------------

    async def store_record(self, conversation_id: str) -> SavedInfo | None:
        """The conversation store's record of a conversation (its latest `saved` entry), or `None`."""
        engine.check_id(conversation_id, 'conversation_id')
        found = await self._read(lambda txn: convstore.read_record(txn, conversation_id))
        return None if found is None else found[1]

    async def store_records(self, *, scope: str | None = None, limit: int | None = None) -> list[convstore.SavedRecord]:
        """The conversation store's records, most recently saved first: of one `scope` when given,
        at most `limit` of them (an index read, not a scan)."""
        if scope is not None:
            engine.check_id(scope, 'scope')
        if limit is not None:
            engine.check_count(limit, 'limit')
        found = await self._read(lambda txn: convstore.read_records(txn, scope=scope, limit=limit))
        return [convstore.SavedRecord(conversation_id, info) for conversation_id, info in found]

    async def store_history(self, head: str | None, *, limit: int | None = None) -> list[convstore.HistoryEntry]:
        """The conversation store's entries from the first one up to `head`, in order, or only the
        last `limit` of them, with their messages' bytes, in one read transaction.

        Raises `NotFoundError` when the store has no entry `head`."""
        if limit is not None:
            engine.check_count(limit, 'limit')
        if head is None or limit == 0:
            return []
        return await self._read(lambda txn: convstore.read_history(txn, head, limit=limit), bulk=limit is None)

    async def store_entry(self, entry_id: str) -> convstore.HistoryEntry:
        """One conversation store entry with its message's bytes; `NotFoundError` when absent."""
        return await self._read(lambda txn: convstore.read_entry(txn, entry_id))

    async def store_save(
        self, conversation_id: str, info: SavedInfo, new_entries: Sequence[convstore.NewStoreEntry]
    ) -> list[int]:
        """Write a conversation store's record and the entries it adds in one transaction, if the
        stored revision is still `info.expected`; return the `seq` of each new entry's message.

        A message this log recorded in the run it names (`EventLogPersistence`) is linked, not
        stored again; the others are appended in a run of the store's own. Raises
        `RevisionConflict` (nothing written) when the record changed since it was read.
        """
        engine.check_id(conversation_id, 'conversation_id')
        return await self._write(lambda txn: convstore.save_record(txn, conversation_id, info, new_entries))

    async def store_delete(
        self, conversation_id: str, *, expected: str, revision: str, updated_at: datetime
    ) -> erasure.Erased:
        """Delete a conversation's store record if its revision is still `expected`, and erase,
        in the same transaction, the content of its entries no other record reaches (a fork keeps
        what it shares); then scrub the store's files as `erase` does.

        Raises `RevisionConflict` (nothing changed) when the record changed since it was read.
        """
        engine.check_id(conversation_id, 'conversation_id')
        by = 'EventLogConversationStore'

        def erase_unkept(txn: WriteTxn, conv_id: str, kept: set[int]) -> erasure.Erased:
            return erasure.erase(
                txn, conv_id, where=lambda entry: entry.seq not in kept, reason=convstore.ERASE_REASON, by=by
            )

        done = await self._write(
            lambda txn: convstore.delete_record(
                txn, conversation_id, expected=expected, revision=revision, updated_at=updated_at, erase=erase_unkept
            ),
            bulk=True,
        )
        erased = [seq for each in done for seq in each.seqs]
        removed = sum(each.payload_bytes for each in done)
        result = erasure.Erased(conversation_id, erased, done[0].erasure_seq, removed)
        if erased:
            problem = await self.scrub()
            return replace(result, scrubbed=problem is None, scrub_error=problem)
        return result

    async def shred(self, conversation_id: str, *, reason: str | None = None, by: str | None = None) -> int:
        """Destroy the conversation's data key (crypto-shredding) and record it in a `shred` entry;
        return that entry's `seq` (docs/encryption.md).

        Its sealed payloads become unreadable in the store and in every copy of it (backups,
        replicas, PostgreSQL's WAL) at once; replay returns placeholders that keep each message's
        role; `verify` still passes; nothing more can be appended to the conversation. The key is
        destroyed before the entry is appended (and again after, for a key made meanwhile), so a
        crash never leaves a conversation recorded as shredded whose content can still be read.

        Raises `EncryptionSetupError` (a plain store, or one opened without keys),
        `ConversationNotFound`, `ConversationShreddedError` (shredded already), or, changing
        nothing, `KeyMissingError` / `WrongKeyError` when the provider does not hold the key the
        conversation's payloads were sealed with (another keyring).
        """
        engine.check_id(conversation_id, 'conversation_id')
        reason = erasure.check_text(reason, 'reason')
        by = erasure.check_text(by, 'by')
        self._check_open()
        self._refuse_write()
        sealer = self._sealer
        if sealer is None or sealer.provider is None:
            raise EncryptionSetupError(f'{self._store_name()} is not encrypted with a key provider; nothing to shred')
        provider = sealer.provider

        def check(txn: SealedTxn) -> bytes | None:
            conv = engine.get_conversation(txn, conversation_id)
            if conv is None or conv.deleted:
                raise ConversationNotFound(f'no conversation {conversation_id!r} in this log')
            txn.refuse_shredded(conversation_id)
            return txn.key_fingerprint_of(conversation_id)

        held = await self._read(cast('Callable[[ReadTxn], bytes | None]', check))
        await to_thread(sealer.check_own_key, conversation_id, held)  # the right keyring, or nothing done
        sealer.forget(conversation_id)
        await to_thread(provider.destroy, sealer.store_id, conversation_id)
        payload = encode_info(ShredInfo(reason=reason, by=by))
        new = NewEntry(conversation_id=conversation_id, kind='shred', payload=payload)
        seq = (await self._write(lambda txn: engine.append_entries(txn, [new], allow_internal=True)))[0]
        sealer.forget(conversation_id)
        await to_thread(provider.destroy, sealer.store_id, conversation_id)
        return seq

    async def scrub(self) -> str | None:
        """Purge removed content (erased entries, deleted conversations) from everything that may
        still hold a copy: every projection in the store's catalogue is brought up to date by its
        maintainer, or cleared (`eventlog.projection.maintain_projections`), then the backend
        rewrites its files (LMDB: `compact`; PostgreSQL: `VACUUM FULL` of
        the log's tables). Returns `None` when done, else a one-line reason it could not be
        (the store busy elsewhere, the disk too full for the rewritten copy): the removal itself
        stays committed either way, and the store records the scrub as pending (`scrub_pending`,
        reported by `verify`) until a later `scrub` finishes it. A read-only handle raises
        `ReadOnlyStoreError`."""
        self._check_open()
        self._refuse_write()
        return await to_thread(self._scrub_sync)

    def _scrub_sync(self) -> str | None:
        pending = self._read_sync(engine.scrub_pending)
        try:
            self._maintain_projections()
            problem = self._rewrite_sync()
        except EventLogError as exc:  # the removal stays committed: say what is left, never raise
            problem = f'{exc}'
        if problem is not None:
            return f'{problem}; the removal itself is committed and its scrub is recorded as pending'
        if pending is not None:
            self._write_sync(lambda txn: engine.clear_scrub_pending(txn, pending))
        return None

    async def scrub_pending(self) -> int | None:
        """The `seq` of the latest erasure or deletion whose removed bytes the store's files may
        still hold (its scrub failed, was refused or was cut short by a crash); `None` when every
        removal has been scrubbed. `scrub()` (or, for LMDB, `compact()`) finishes it."""
        return await self._read(engine.scrub_pending)

    def _rewrite_sync(self) -> str | None:
        """Rewrite the store so freed space holds no removed bytes; in memory there is nothing to do."""
        return None

    def _maintain_projections(self) -> None:
        """Run every catalogued projection's maintainer, or clear the projection (before a scrub)."""
        from eventlog.projection import CataloguedStore, maintain_projections

        if isinstance(self, CataloguedStore):
            maintain_projections(self)

    retention_report: RetentionReport | None = None
    """What the retention policy given when the log was opened did (`None`: no policy was given)."""

    def _retain_on_open(self, policy: RetentionPolicy | None) -> None:
        """Apply `policy` as the log opens (the constructors' `retention=`), closing it if that fails.

        Runs `retain` to completion on an event loop of its own in a worker thread, so that a
        constructor called from async code (a loop already running) can apply it too.
        """
        if policy is None:
            return
        from eventlog.retention import RetentionPolicy  # here: a log opened without a policy never needs it

        if not isinstance(policy, RetentionPolicy):  # pyright: ignore[reportUnnecessaryIsInstance]
            self.close()
            raise InvalidArgumentError(f'retention takes a RetentionPolicy, got {type(policy).__name__}')
        if self.read_only_reason is not None:  # retention erases: refused before anything is read
            self.close()
            self._refuse_write()
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        try:
            with ThreadPoolExecutor(1, thread_name_prefix='eventlog-retention') as pool:
                self.retention_report = pool.submit(asyncio.run, self.retain(policy)).result()
        except BaseException:
            self.close()
            raise

    async def retain(
        self, policy: RetentionPolicy, *, dry_run: bool = False, now: datetime | None = None, scrub: bool = True
    ) -> RetentionReport:
        """Apply a retention policy: erase (or delete, per `policy.action`) what is older than its
        conversation's limit, measured from `now` (the current time); report per conversation.

        With `dry_run` nothing changes and the report says what would be erased or deleted.
        """
        from eventlog.retention import RetentionPolicy, RetentionReport, format_age

        if not isinstance(policy, RetentionPolicy):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(f'retain takes a RetentionPolicy, got {type(policy).__name__}')
        if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError('now must be a timezone-aware datetime')
        if not dry_run:
            self._refuse_write()
        moment = now or engine.utcnow()
        convs = await self.list_conversations(include_archived=True)
        erased: dict[str, int] = {}
        deleted: dict[str, int] = {}
        for conv in convs:
            age = policy.age_for(conv.conversation_id)
            if age is None:
                continue
            cutoff = moment - age
            if policy.action == 'delete':
                if conv.updated_at < cutoff:
                    deleted[conv.conversation_id] = (
                        conv.entry_count if dry_run else await self.delete_conversation(conv.conversation_id)
                    )
                continue

            def older(entry: Entry, cutoff: datetime = cutoff) -> bool:
                return entry.timestamp < cutoff

            if dry_run:
                found = await self.entries(conversation_id=conv.conversation_id, kinds=erasure.ERASABLE_KINDS)
                count = sum(1 for e in found if not e.erased and older(e))
            else:
                done = await self.erase(
                    conv.conversation_id, where=older, reason=f'retention: older than {format_age(age)}', scrub=False
                )
                count = len(done.seqs)
            if count:
                erased[conv.conversation_id] = count
        report = RetentionReport(action=policy.action, dry_run=dry_run, erased=erased, deleted=deleted)
        if scrub and not dry_run and (erased or deleted):
            problem = await self.scrub()
            report = replace(report, scrubbed=problem is None, scrub_error=problem)
        return report

    # -- export, import, verify ---------------------------------------------------------------

    async def export(
        self,
        destination: str | Path | IO[bytes],
        *,
        conversation_ids: Sequence[str] | None = None,
        signed: bool = False,
        signer: SignerSource | None = None,
    ) -> int:
        """Write entries as JSON Lines (all, or the named conversations and the history they
        reference); return how many entries were written.

        A path that is absent or a regular file gets a new file (mode 0600) renamed into place
        only once complete; a device or FIFO is written in place; a symlink is followed (one to
        nothing is refused), see `eventlog._files`.

        `signed` adds, after the closing line, every checkpoint the store recorded and a line
        naming their keys (docs/audit.md); with `signer`, a new checkpoint is made first so the
        export's every entry is covered. `eventlog.checkpoint.verify_export` checks such a file.
        An unsigned export is unchanged.
        """
        ids = None if conversation_ids is None else [engine.check_id(c, 'conversation_id') for c in conversation_ids]
        if signer is not None:
            if not signed:
                raise InvalidArgumentError('a signer is only used by a signed export (signed=True)')
            await self.checkpoint(signer)

        from eventlog import _transfer as transfer
        from eventlog import checkpoint as checkpoints_module

        def write_to(stream: IO[bytes]) -> int:
            def run(txn: ReadTxn) -> int:
                trailer = checkpoints_module.signed_trailer(txn, complete=ids is None) if signed else []
                count = -1
                for line in transfer.export_lines(txn, ids):
                    stream.write(line)
                    count += 1
                for line in trailer:
                    stream.write(line)
                return count

            return self._read_sync(run)

        def work() -> int:
            if isinstance(destination, (str, Path)):
                with open_destination(destination) as fh:
                    return write_to(fh)
            return write_to(destination)

        self._check_open()
        return await to_thread(work)

    async def import_(self, source: str | Path | IO[bytes], *, allow_version_1: bool = False) -> int:
        """Read an export into this log; return how many entries were written.

        The export is read and its hash chains and closing line checked as it is written,
        in one transaction, holding a bounded number of lines in memory; a conversation that
        already exists here, a reference to an entry the export does not carry, or any other
        problem anywhere aborts it, so nothing is written unless everything is accepted.
        Exports of format 1 (no closing line) are refused unless `allow_version_1`. An encrypted
        store seals what it imports; an export of an encrypted store (sealed payloads) is refused.
        """

        from eventlog import _transfer as transfer

        def write(fn: Callable[[WriteTxn], T]) -> T:
            return self._write_sync(cast('Callable[[WriteTxn], T]', self._sealed(fn)))

        def work() -> int:
            return transfer.import_from(write, source, allow_version_1=allow_version_1)

        self._check_open()
        self._refuse_write()
        return await to_thread(work)

    async def verify(
        self,
        *,
        checkpoints: Sequence[CheckpointSource] | None = None,
        public_key: PublicKeySource | None = None,
    ) -> VerifyReport:
        """Check every conversation's hash chain and everything derived from the entries (run
        and conversation records, indexes, and for a store on disk the file's structure); `ok`
        only when all match. Each problem is a named finding (docs/verify.md).

        With `checkpoints` (`Checkpoint`s or checkpoint files) and the `public_key` that signed
        them, also prove that nothing up to each checkpoint was altered, removed, inserted or
        reordered, even with recomputed hashes: the first entry of each conversation that differs
        from the signed history is named (`checkpoint-*` findings, docs/audit.md). A checkpoint
        signed by another key, or with a bad signature, raises `CheckpointSignatureError`; one
        covering entries beyond the store's last `seq`, `CheckpointAheadError`.
        """
        self._check_open()
        if checkpoints is None:
            if public_key is not None:
                raise InvalidArgumentError('a public key is only used with checkpoints to verify against')
            return await to_thread(self._verify_sync)
        if public_key is None:
            raise InvalidArgumentError('verifying against checkpoints needs the public key that signed them')
        from eventlog import checkpoint as checkpoints_module
        from eventlog._verify import report_of

        loaded = await to_thread(checkpoints_module.load_checkpoints, checkpoints)
        checkpoints_module.verify_signatures(loaded, public_key)
        found = await to_thread(self._read_sync, partial(checkpoints_module.compare_store, checkpoints=loaded))
        report = await to_thread(self._verify_sync)
        return report_of(found, report)

    async def checkpoint(
        self, signer: SignerSource, *, path: str | Path | None = None, full: bool = False
    ) -> Checkpoint:
        """Sign the head of every conversation and the store-wide head with `signer` (a `Signer`
        or a PEM private key file), record the checkpoint in the store, and return it; with
        `path`, also write it to that file (keep it outside the store, docs/audit.md).

        The checkpoint lists the hash of every entry appended since the last checkpoint recorded
        in the store (all of them when `full`), so that a series of checkpoints lets `verify`
        name the exact entry that differs.
        """
        from eventlog import checkpoint as checkpoints_module

        key = checkpoints_module.as_signer(signer)
        made = await self._write(lambda txn: checkpoints_module.make_checkpoint(txn, key, full=full), bulk=True)
        if path is not None:
            await to_thread(made.write, path)
        return made

    async def checkpoints(self) -> list[Checkpoint]:
        """The checkpoints recorded in the store, oldest first (their signatures unchecked)."""
        from eventlog import checkpoint as checkpoints_module

        return await self._read(checkpoints_module.recorded_checkpoints, bulk=True)

    def _verify_sync(self) -> VerifyReport:
        """`verify` in the calling thread; a backend with a file of its own checks it first."""
        from eventlog._verify import verify as verify_store

        return self._read_sync(verify_store)

    async def require_conversation(self, conversation_id: str) -> ConversationRecord:
        """A conversation's record, or `ConversationNotFound`."""
        record = await self.get_conversation(conversation_id)
        if record is None:
            raise ConversationNotFound(f'no conversation {conversation_id!r} in this log')
        return record

    # -- ids by prefix ------------------------------------------------------------------------

    async def ids_with_prefix(self, kind: IdKind, prefix: str, *, limit: int = 10) -> list[str]:
        """The run ids (`kind='run'`) or conversation ids (`'conversation'`) that start with
        `prefix`, in id order (bytewise, as stored), at most `limit` of them.

        A key-range scan: its cost grows with `limit`, not with the store. Archived
        conversations are found, deleted ones are not. An exact id is among the results when
        it exists (it starts with itself); telling an exact id from a prefix is the caller's
        choice (the command line prefers the exact id).
        """
        ids.table_of(kind)  # refuses an unknown kind before anything is read
        engine.check_id(prefix, 'prefix')
        engine.check_count(limit, 'limit')
        return await self._read(lambda txn: ids.ids_with_prefix(txn, kind, prefix, limit), bulk=limit > _BULK_THRESHOLD)

    async def unique_prefix_lengths(self, kind: IdKind, identifiers: Iterable[str]) -> dict[str, int]:
        """For each of `identifiers`, the length of its shortest prefix that no other stored
        run id (`kind='run'`) or conversation id (`'conversation'`) starts with: what an
        abbreviated id must keep to name it alone, as `git` abbreviates hashes. When another
        stored id starts with the whole of it, its full length. An id need not be stored.

        Two neighbour look-ups in key order per id, in one read transaction.
        """
        ids.table_of(kind)
        wanted = list(dict.fromkeys(engine.check_id(i, 'id') for i in identifiers))
        if not wanted:
            return {}
        return await self._read(
            lambda txn: ids.unique_prefix_lengths(txn, kind, wanted), bulk=len(wanted) > _BULK_THRESHOLD
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Release the log's resources; later calls raise `LogClosedError`."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _check_kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    kind_set = None if kinds is None else frozenset(kinds)
    if kind_set is not None and not kind_set <= engine.KINDS:
        raise InvalidArgumentError(f'unknown kinds {sorted(kind_set - engine.KINDS)}')
    return kind_set


def _check_batch(batch: int) -> None:
    if not isinstance(batch, int) or isinstance(batch, bool) or not 0 < batch <= 1_000_000:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(f'batch must be an integer from 1 to 1000000, got {batch!r}')


def _decode_in_batches(payloads: Iterator[bytes]) -> list[ModelMessage]:
    """Decode message payloads a batch at a time, never joining them all into one JSON text."""
    out: list[ModelMessage] = []
    chunk: list[bytes] = []
    size = 0
    for payload in payloads:
        chunk.append(payload)
        size += len(payload)
        if len(chunk) >= _DECODE_BATCH or size >= STREAM_BYTES:
            out.extend(engine.decode_payloads(chunk))
            chunk, size = [], 0
    out.extend(engine.decode_payloads(chunk))
    return out


def _take(found: Iterator[Entry], count: int) -> tuple[list[Entry], bool]:
    """Up to `count` entries of `found`, fewer once their payloads pass `STREAM_BYTES`; and
    whether more may follow."""
    out: list[Entry] = []
    size = 0
    for entry in found:
        out.append(entry)
        size += len(entry.payload)
        if len(out) >= count or size >= STREAM_BYTES:
            return out, True
    return out, False


def _take_branch(
    txn: ReadTxn, *, stretches: list[stream.Stretch], kinds: frozenset[str] | None, after: int, count: int
) -> tuple[list[Entry], bool]:
    return _take(stream.branch_entries(txn, stretches, kinds, after), count)


def _take_entries(
    txn: ReadTxn,
    *,
    conversation_id: str | None,
    run_id: str | None,
    kinds: frozenset[str] | None,
    after: int,
    count: int,
) -> tuple[list[Entry], bool]:
    found = engine.iter_entries(txn, conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=after)
    return _take(found, count)


def _plan_payloads(
    txn: ReadTxn, *, plan: list[stream.ContextItem], start: int, count: int, payload_limit: int | None = None
) -> tuple[list[tuple[bytes, int]], int]:
    """The payloads of `plan` from item `start` (cut to `payload_limit` bytes unless `None`) with
    their full sizes: up to `count` items, fewer once the bytes read pass `STREAM_BYTES`; and the
    index of the next item."""
    items: Iterator[list[tuple[bytes, int]]] = (
        ([(payload, len(payload)) for payload in payloads] for payloads in stream.plan_items(txn, plan, start))
        if payload_limit is None
        else stream.plan_item_heads(txn, plan, start, payload_limit)
    )
    out: list[tuple[bytes, int]] = []
    size = 0
    index = start
    for index, heads in enumerate(items, start=start):
        out.extend(heads)
        size += sum(len(payload) for payload, _ in heads)
        if len(out) >= count or size >= STREAM_BYTES:
            return out, index + 1
    return out, len(plan)
