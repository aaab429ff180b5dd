"""Run leases: one execution of a run at a time, fenced in the store's own transactions.

A run's lease is a META record (`_keys.lease_key`) holding its owner, its epoch and when it
lapses. It is taken, renewed and released in write transactions of the log, so they serialize
with every append. An append made under a lease (a *fence*, `fence`) checks, in the transaction
that writes it, that the record still holds the fence's owner and epoch: once another execution
took the lease over, the old holder's appends fail with `RunLeaseError` and write nothing.

Time only decides when a lease may be taken from another holder (it lapsed by the taker's wall
clock); it never lets a stale holder write. A lease taken for an *executor* (an id that names one
process and persists across its restarts) may be taken over at once by a new execution of the
same executor: that process restarted, so its old execution is dead (or fenced if it is not).
Holders' clocks are assumed to agree within a bound well below the lease's length; a holder
paused past its lease (a stopped process, a long pause, a suspended machine) may be taken over,
and is then fenced rather than trusted.
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final

import msgspec

from eventlog._checks import check_id
from eventlog._keys import Table, lease_key
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.entries import RunLease
from eventlog.errors import CorruptStoreError, InvalidArgumentError, RunLeaseError

__all__ = ['FENCE', 'check_args', 'check_fence', 'get_lease', 'release_lease', 'renew_lease', 'take_lease']


class _Stored(msgspec.Struct, frozen=True, array_like=True):
    owner: str
    epoch: int
    expires: float
    executor: str | None = None
    """Absent from records written before executors existed; readers of that time ignore it."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Stored)

FENCE: Final[ContextVar[tuple[object, RunLease] | None]] = ContextVar('eventlog_run_lease_fence', default=None)
"""The lease the current task's appends are made under, with the log it is held in (set by
`EventLogBase.run_lease_fence`; `asyncio.to_thread` and new tasks carry it)."""


def _read(txn: ReadTxn, run_id: str) -> _Stored | None:
    raw = txn.get(Table.META, lease_key(run_id))
    if raw is None:
        return None
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        raise CorruptStoreError(f'the lease of run {run_id!r} cannot be decoded') from None


def _when(expires: float) -> datetime:
    return datetime.fromtimestamp(expires, UTC)


def check_args(run_id: str, owner: str, seconds: float, executor: str | None = None) -> None:
    check_id(run_id, 'run_id')
    check_id(owner, 'owner')
    if executor is not None:
        check_id(executor, 'executor')
    if not (isinstance(seconds, int | float) and seconds > 0):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(f'a lease lasts a positive number of seconds, got {seconds!r}')


def get_lease(txn: ReadTxn, run_id: str) -> RunLease | None:
    """The run's lease as the store holds it (it may have lapsed), or `None`."""
    held = _read(txn, run_id)
    if held is None:
        return None
    return RunLease(run_id=run_id, owner=held.owner, epoch=held.epoch, expires=held.expires, executor=held.executor)


def take_lease(
    txn: WriteTxn, run_id: str, owner: str, seconds: float, now: float, executor: str | None = None
) -> RunLease:
    """Take the run's lease for `owner` (of `executor`, if given) for `seconds` from `now` (the
    taker's wall clock, seconds since the epoch): when it is free, lapsed by `now`, `owner`'s
    already, or held by another execution of the same `executor` (taken over at once)."""
    held = _read(txn, run_id)
    epoch = 1
    if held is not None:
        if held.owner == owner:
            epoch = held.epoch
        elif held.expires > now and (executor is None or held.executor != executor):
            until = _when(held.expires).isoformat(timespec='seconds')
            raise RunLeaseError(
                f'run {run_id!r} is being executed by another process (its lease runs until {until}, '
                f'{held.expires - now:.1f}s from now, unless renewed); only one process may execute a run at a time',
                run_id=run_id,
                held_until=_when(held.expires),
            )
        else:
            epoch = held.epoch + 1
    txn.put(Table.META, lease_key(run_id), _encoder.encode(_Stored(owner, epoch, now + seconds, executor)))
    return RunLease(run_id=run_id, owner=owner, epoch=epoch, expires=now + seconds, executor=executor)


def _lost(lease: RunLease, held: _Stored | None) -> RunLeaseError:
    if held is None:
        why = 'the lease was released by another holder'
    else:
        until = _when(held.expires).isoformat(timespec='seconds')
        why = f'another process holds it now (epoch {held.epoch}, until {until})'
    return RunLeaseError(f'run {lease.run_id!r} lost its lease (epoch {lease.epoch}): {why}', run_id=lease.run_id)


def check_fence(txn: ReadTxn, lease: RunLease) -> _Stored:
    """Raise `RunLeaseError` unless the store still holds `lease`'s token (whether or not it
    lapsed); the record it holds."""
    held = _read(txn, lease.run_id)
    if held is None or held.owner != lease.owner or held.epoch != lease.epoch:
        raise _lost(lease, held)
    return held


def renew_lease(txn: WriteTxn, lease: RunLease, seconds: float, now: float) -> RunLease:
    """Extend `lease` to `seconds` from `now` (the holder's wall clock); `RunLeaseError` if it is no
    longer the store's. The executor stays the one the lease was taken for."""
    held = check_fence(txn, lease)
    expires = now + seconds
    txn.put(
        Table.META, lease_key(lease.run_id), _encoder.encode(_Stored(held.owner, held.epoch, expires, held.executor))
    )
    return RunLease(run_id=lease.run_id, owner=held.owner, epoch=held.epoch, expires=expires, executor=held.executor)


def release_lease(txn: WriteTxn, lease: RunLease) -> bool:
    """Drop `lease` if the store still holds it; whether it did."""
    held = _read(txn, lease.run_id)
    if held is None or held.owner != lease.owner or held.epoch != lease.epoch:
        return False
    txn.delete(Table.META, lease_key(lease.run_id))
    return True
