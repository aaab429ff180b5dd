"""`VectorIndex`: message embeddings kept in the log's store, as a tracked projection.

Like the BM25 index (`search.persistent_index`), the vector index is a projection of the log
(`eventlog.projection`): it runs on every backend that offers the projection API (LMDB,
PostgreSQL, in memory), follows the log by position, and can be cleared and rebuilt from the
entries with the same result. One vector is kept per stored message, by the `seq` of the entry
that stored it; a search looks up the vectors of the messages its corpus holds, so scope rules
are the corpus's, exactly as for BM25.

Embedding never happens inside a transaction of the store: `catch_up` reads a batch of
messages in a read transaction, embeds them with the pydantic-ai `Embedder` (awaited, so a
remote model's request or sentence-transformers' worker thread runs off the event loop), then
writes the vectors and the new position in a short write transaction, provided the index has
not moved meanwhile. Appends therefore never wait for an embedding: they commit first, and the
index catches up behind them (`VectorIndex.pending` says how far behind it is).

Tables of the projection `vx`:

- `vx.meta`  `model` (the embedding model's name), `dim` (its dimension), `format`, and `epoch`
             (changed whenever vectors are removed, so a process's in-memory copy is dropped)
- `vx.vec`   seq -> the message's unit-length embedding, float32 little-endian
- `vx.conv`  id_prefix(conversation) + seq -> '' (which vectors a deletion or an erasure removes)

A message whose indexed text is empty, an erased message (its placeholder says nothing) and the
search tool's own calls and returns get no vector. A `deleted` entry removes the conversation's
vectors; an `erasure` entry removes those of the entries it erased. A rebuild reads neither the
deleted entries (the log no longer holds them) nor the erased contents, so it arrives at the same
vectors.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np
from numpy.typing import NDArray

from eventlog.entries import ErasureInfo
from eventlog.errors import CorruptStoreError, InvalidArgumentError, VectorIndexMismatch
from eventlog.projection import (
    LogReader,
    ProjectionRecords,
    ProjectionSpec,
    ProjectionStore,
    ProjectionWriter,
    id_prefix,
    key_seq,
    seq_key,
)

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ['VECTOR_PROJECTION', 'VectorIndex', 'VectorState', 'embedder_name', 'maintain_vectors']

VECTOR_FORMAT: Final = 1
"""The layout of the `vx` tables; an index of another format is rebuilt when opened."""
_TABLES = ('meta', 'vec', 'conv')
VECTOR_PROJECTION: Final = ProjectionSpec('vx', _TABLES, format=str(VECTOR_FORMAT))
"""The vector index as a projection of the store: its name (the kind `vx`, whose maintainer the log
runs before every scrub and compaction, `maintain_vectors`, whatever the calling process imported),
its tables and its format."""

DEFAULT_BATCH: Final = 64
"""Messages embedded per call of the embedding model."""
_SCAN_LIMIT: Final = 5000
"""Entries read per planning transaction at most (a stretch without messages moves on in steps)."""

_erasure_dec = msgspec.json.Decoder(ErasureInfo)


def embedder_name(embedder: Embedder) -> str:
    """The name an index records for `embedder`'s model: `system:model_name`, or the string it was given."""
    from pydantic_ai.embeddings import EmbeddingModel

    model = embedder.model
    if isinstance(model, EmbeddingModel):
        return f'{model.system}:{model.model_name}'
    return model


class VectorState(msgspec.Struct, frozen=True):
    """Where a vector index stands."""

    model: str | None
    """The embedding model it was built with (`None` before its first vector)."""
    dimension: int | None
    """The length of its vectors."""
    position: int
    """The last `seq` applied."""
    log_position: int
    """The log's last `seq`."""
    vectors: int
    """How many messages have a vector."""
    pending: int
    """Log entries after `position`, not applied yet (the messages among them have no vector yet)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """One batch to apply: read in a read transaction, embedded outside any transaction."""

    position: int
    """The index's position when the batch was read (the write checks it has not moved)."""
    end: int
    """The position after applying the batch."""
    items: list[tuple[int, str, str]]
    """`(seq, conversation, text)` of the messages to embed."""
    removals: list[tuple[str, list[int] | None]]
    """After the messages: a conversation whose vectors all go (`None`), or those of some entries."""


def _meta(records: ProjectionRecords, key: bytes) -> str | None:
    raw = records.get('meta', key)
    return None if raw is None else raw.decode(errors='replace')


def _message_text(payload: bytes, seq: int) -> str:
    from search.index_writer import readable_text

    return readable_text(payload, seq) or ''  # an unreadable message is embedded as no text


class _Rows:
    """This process's copy of the vectors read so far: one matrix, a row per `seq`."""

    def __init__(self) -> None:
        self.epoch: str | None = None
        self.rows: dict[int, int] = {}
        self.matrix: NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self.count = 0

    def reset(self, epoch: str | None) -> None:
        self.epoch = epoch
        self.rows = {}
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.count = 0

    def add(self, seq: int, vector: NDArray[np.float32]) -> None:
        if self.matrix.shape[1] != vector.shape[0]:
            self.matrix = np.zeros((max(1024, self.count * 2), vector.shape[0]), dtype=np.float32)
            self.rows, self.count = {}, 0
        if self.count == self.matrix.shape[0]:
            grown = np.zeros((self.count * 2, self.matrix.shape[1]), dtype=np.float32)
            grown[: self.count] = self.matrix[: self.count]
            self.matrix = grown
        self.matrix[self.count] = vector
        self.rows[seq] = self.count
        self.count += 1


class VectorIndex:
    """The embeddings of a log's messages, kept in its store as a tracked projection.

    Args:
        log: The log whose messages are embedded; the vectors live in the same store.
        embedder: The pydantic-ai `Embedder` that embeds messages (as documents) and queries.
        model_name: The name recorded for the model (default: `embedder_name(embedder)`). The first
            vector written records it; opening the index with another name, or getting vectors of
            another dimension, raises `VectorIndexMismatch` until `rebuild`.
        batch_size: Messages per call of the embedding model.
    """

    def __init__(
        self,
        log: ProjectionStore,
        embedder: Embedder,
        *,
        model_name: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(f'batch_size must be a positive integer, got {batch_size!r}')
        self.log = log
        self.embedder = embedder
        self.model_name: str = model_name if model_name is not None else embedder_name(embedder)
        self.batch_size = batch_size
        self._busy = threading.Lock()
        self._cache_lock = threading.Lock()
        self._rows = _Rows()
        self._last_index: tuple[tuple[int, int, str | None, int], Sequence[int], NDArray[np.int64]] | None = None
        stored, fmt = self.log.read_projection(
            VECTOR_PROJECTION, lambda records, _: (_meta(records, b'model'), _meta(records, b'format'))
        )
        if stored is not None and fmt != str(VECTOR_FORMAT):
            self.log.write_projection(VECTOR_PROJECTION, lambda records, _: records.clear())
        elif stored is not None and stored != self.model_name:
            raise VectorIndexMismatch(self._mismatch(stored))

    def _mismatch(self, stored: str) -> str:
        return (
            f'the vector index of this store was built with the embedding model {stored!r}, not '
            f'{self.model_name!r}; rebuild it with the new model first (VectorIndex.rebuild)'
        )

    @classmethod
    def for_log(cls, log: ProjectionStore, embedder: Embedder, *, model_name: str | None = None) -> VectorIndex:
        """The vector index of `log` for `embedder`'s model, shared by every caller in this process."""
        name = model_name if model_name is not None else embedder_name(embedder)
        per_log = _shared.setdefault(log, {})
        index = per_log.get(name)
        if index is None or index.embedder is not embedder:
            index = per_log[name] = cls(log, embedder, model_name=name)
        return index

    # -- keeping current ----------------------------------------------------------------------

    def state(self) -> VectorState:
        """The index's model, dimension, position and size, and the log's position."""

        def read(records: ProjectionRecords, reader: LogReader) -> VectorState:
            dim = _meta(records, b'dim')
            position = records.position() or 0
            last = reader.last_seq()
            return VectorState(
                model=_meta(records, b'model'),
                dimension=None if dim is None else int(dim),
                position=position,
                log_position=last,
                vectors=sum(1 for _ in records.scan('vec')),
                pending=_pending(reader, position),
            )

        return self.log.read_projection(VECTOR_PROJECTION, read)

    def pending(self) -> int:
        """How many log entries the index is behind (appended after its position; their messages have no
        vector yet)."""
        return self.log.read_projection(
            VECTOR_PROJECTION, lambda records, reader: _pending(reader, records.position() or 0)
        )

    async def catch_up(self, limit: int | None = None) -> int:
        """Embed the messages stored since the index's position, a batch at a time; return how many.

        At most about `limit` messages when given (whole batches). Returns 0 at once when another
        catch-up of this index is running (it is doing the work). The store is locked only to read a
        batch and to write its vectors, never while the model embeds.
        """
        if not self._busy.acquire(blocking=False):
            return 0
        try:
            done = 0
            while limit is None or done < limit:
                plan = self.log.read_projection(VECTOR_PROJECTION, self._plan)
                if plan is None:
                    return done
                vectors = await self._embed([text for _, _, text in plan.items])
                if self.log.write_projection(VECTOR_PROJECTION, partial(self._write, plan=plan, vectors=vectors)):
                    done += len(plan.items)
            return done
        finally:
            self._busy.release()

    def _plan(self, records: ProjectionRecords, reader: LogReader) -> _Plan | None:
        stored = _meta(records, b'model')
        if stored is not None and stored != self.model_name:
            raise VectorIndexMismatch(self._mismatch(stored))
        position = records.position() or 0
        last = reader.last_seq()
        if position >= last:
            return None
        items: list[tuple[int, str, str]] = []
        removals: list[tuple[str, list[int] | None]] = []
        end = position
        scanned = 0
        for entry in reader.entries_after(position, limit=_SCAN_LIMIT):
            scanned += 1  # noqa: SIM113
            if entry.kind in ('deleted', 'erasure', 'shred'):
                if items:
                    break  # the messages before it go first, in their own write
                if entry.kind in ('deleted', 'shred'):  # a shred leaves nothing to embed
                    removals.append((entry.conversation_id, None))
                else:
                    removals.append((entry.conversation_id, _erasure_dec.decode(entry.payload).seqs))
                end = entry.seq
                break
            end = entry.seq
            if entry.kind == 'message' and not entry.erased:
                text = _message_text(entry.payload, entry.seq)
                if text.strip():
                    items.append((entry.seq, entry.conversation_id, text))
                    if len(items) >= self.batch_size:
                        break
        else:
            if scanned < _SCAN_LIMIT and not removals:
                end = last
        return _Plan(position, end, items, removals)

    async def _embed(self, texts: list[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        result = await self.embedder.embed_documents(texts)
        return unit_rows(result.embeddings, len(texts))

    def _write(self, records: ProjectionWriter, _: LogReader, *, plan: _Plan, vectors: NDArray[np.float32]) -> bool:
        if (records.position() or 0) != plan.position:
            return False  # another process applied this stretch meanwhile
        stored = _meta(records, b'model')
        if stored is not None and stored != self.model_name:
            raise VectorIndexMismatch(self._mismatch(stored))
        if stored is None:
            records.put('meta', b'model', self.model_name.encode())
            records.put('meta', b'format', str(VECTOR_FORMAT).encode())
            records.put('meta', b'epoch', os.urandom(8).hex().encode())
        if plan.items:
            dim = _meta(records, b'dim')
            if dim is None:
                records.put('meta', b'dim', str(vectors.shape[1]).encode())
            elif int(dim) != vectors.shape[1]:
                raise VectorIndexMismatch(
                    f'the embedding model {self.model_name!r} gave vectors of {vectors.shape[1]} dimensions, '
                    f'but the vector index holds {dim}; rebuild it (VectorIndex.rebuild)'
                )
            for (seq, conversation_id, _text), vector in zip(plan.items, vectors, strict=True):
                records.put('vec', seq_key(seq), vector.astype('<f4').tobytes())
                records.put('conv', id_prefix(conversation_id) + seq_key(seq), b'')
        if plan.removals:
            for conversation_id, seqs in plan.removals:
                _remove(records, conversation_id, seqs)
            records.put('meta', b'epoch', os.urandom(8).hex().encode())
        records.set_position(plan.end)
        return True

    async def rebuild(self, embedder: Embedder | None = None, *, model_name: str | None = None) -> int:
        """Clear the index and embed every message again (optionally with another model); return how many."""
        if embedder is not None:
            self.embedder = embedder
            self.model_name = model_name if model_name is not None else embedder_name(embedder)
            _shared[self.log] = {self.model_name: self}
        elif model_name is not None:
            self.model_name = model_name
        self.log.write_projection(VECTOR_PROJECTION, lambda records, _: records.clear())
        with self._cache_lock:
            self._rows.reset(None)
        return await self.catch_up()

    # -- searching ----------------------------------------------------------------------------

    async def embed_query(self, query: str) -> NDArray[np.float32]:
        """`query`'s unit-length embedding."""
        result = await self.embedder.embed_query(query)
        return unit_rows(result.embeddings, 1)[0]

    def similarities(
        self, seqs: Sequence[int], query: NDArray[np.float32]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """Cosine similarity of each message (`seqs`) to `query`, and which messages have a vector.

        Vectors are read from the store once per process and kept in memory; the copy is dropped
        when the store's vectors were removed since (a deletion or an erasure, from any process).
        """

        def read(records: ProjectionRecords, _: LogReader) -> None:
            epoch = _meta(records, b'epoch')
            with self._cache_lock:
                rows = self._rows
                if rows.epoch != epoch:
                    rows.reset(epoch)
                for seq in seqs:
                    if seq in rows.rows:
                        continue
                    raw = records.get('vec', seq_key(seq))
                    if raw is None:
                        continue
                    vector = np.frombuffer(raw, dtype='<f4').astype(np.float32)
                    if rows.count and vector.shape[0] != rows.matrix.shape[1]:
                        raise CorruptStoreError(f'the vector index holds a vector of another length at entry {seq}')
                    rows.add(seq, vector)

        self.log.read_projection(VECTOR_PROJECTION, read)
        with self._cache_lock:
            rows = self._rows
            key = (id(seqs), len(seqs), rows.epoch, rows.count)
            if self._last_index is not None and self._last_index[0] == key and self._last_index[1] is seqs:
                index = self._last_index[2]
            else:
                index = np.fromiter((rows.rows.get(seq, -1) for seq in seqs), dtype=np.int64, count=len(seqs))
                self._last_index = (key, seqs, index)
            present = index >= 0
            scores = np.zeros(len(seqs), dtype=np.float64)
            if rows.count and present.any():
                if query.shape[0] != rows.matrix.shape[1]:
                    raise VectorIndexMismatch(
                        f'the query embedding has {query.shape[0]} dimensions, the vector index {rows.matrix.shape[1]}'
                    )
                every = rows.matrix[: rows.count] @ query
                scores[present] = every[index[present]]
        return scores, present

    def seqs_with_vectors(self) -> list[int]:
        """Every `seq` that has a vector, in order (for tests and checks)."""
        return self.log.read_projection(
            VECTOR_PROJECTION, lambda records, _: [key_seq(key) for key, _ in records.scan('vec')]
        )

    def vector_records(self) -> dict[bytes, bytes]:
        """The `vec` and `conv` tables' records, keyed by table name and key (to compare a rebuild)."""

        def read(records: ProjectionRecords, _: LogReader) -> dict[bytes, bytes]:
            out: dict[bytes, bytes] = {}
            for table in ('vec', 'conv'):
                out.update((table.encode() + b'/' + key, value) for key, value in records.scan(table))
            return out

        return self.log.read_projection(VECTOR_PROJECTION, read)


def maintain_vectors(store: ProjectionStore) -> None:
    """The maintainer of the kind `vx` (`eventlog.projection.maintainer_for`): remove the vectors of what
    was erased or deleted after the index's position, without embedding anything (no model is
    needed) and without moving the position. Catching up later removes them again, which changes
    nothing; the messages it has still to embed are read erased, or not at all once deleted."""

    def apply(records: ProjectionWriter, reader: LogReader) -> None:
        if _meta(records, b'model') is None:
            return  # never built: no vector to remove
        removed = False
        for entry in reader.entries_after(records.position() or 0):
            if entry.kind in ('deleted', 'shred'):
                _remove(records, entry.conversation_id, None)
            elif entry.kind == 'erasure':
                _remove(records, entry.conversation_id, _erasure_dec.decode(entry.payload).seqs)
            else:
                continue
            removed = True
        if removed:
            records.put('meta', b'epoch', os.urandom(8).hex().encode())

    store.write_projection(VECTOR_PROJECTION, apply)


def _remove(records: ProjectionWriter, conversation_id: str, seqs: list[int] | None) -> None:
    """Remove a conversation's vectors (`seqs` `None`), or those of some of its entries."""
    prefix = id_prefix(conversation_id)
    if seqs is None:
        for key in records.delete_prefix('conv', prefix):
            records.delete('vec', key[len(prefix) :])
        return
    for seq in seqs:
        records.delete('conv', prefix + seq_key(seq))
        records.delete('vec', seq_key(seq))


def _pending(reader: LogReader, position: int) -> int:
    return max(reader.last_seq() - position, 0)


def unit_rows(embeddings: Sequence[Sequence[float]], count: int) -> NDArray[np.float32]:
    """`count` embeddings as float32 rows of length 1 (a zero vector stays zero).

    Raises:
        VectorIndexMismatch: the model returned another number of vectors, or empty ones.
    """
    matrix = np.asarray(embeddings, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != count or matrix.shape[1] == 0:
        raise VectorIndexMismatch(f'the embedding model returned {matrix.shape} for {count} texts')
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


_shared: weakref.WeakKeyDictionary[ProjectionStore, dict[str, VectorIndex]] = weakref.WeakKeyDictionary()
"""The vector indexes `VectorIndex.for_log` hands out, per log and model name."""
