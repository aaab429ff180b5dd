"""Encryption at rest with a data key per conversation, and erasure by destroying that key.

A store opened with a key provider (`LmdbEventLog(path, keys=...)`, `PostgresEventLog(dsn,
keys=...)`) seals the payload of every content entry (`SEALED_KINDS`: messages, compactions,
durable steps, recalls) with AES-256-GCM under a random data key of the entry's conversation.
The associated data is the entry's identity (the store's id, its `seq`, its conversation), so a
sealed payload copied onto another entry fails to open (`PayloadMovedError`). The chain hash
covers the stored (sealed) bytes, so `verify` and signed checkpoints need no key.

Data keys live with the key provider, never in the store: a copy of the store (a backup, a
replica, PostgreSQL's WAL) holds only sealed payloads, and destroying a conversation's key at
the provider (`shred`) makes every copy of its payloads unreadable at once (docs/encryption.md).

This module owns everything about sealing: the stored format of a sealed payload, the key
provider protocol and its file-based implementation, and the transaction view the engine reads
through (payloads opened on the way out, placeholders for shredded conversations).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, runtime_checkable

import msgspec

from eventlog._keys import (
    SEQ_SIZE,
    StoredBody,
    Table,
    TableId,
    append_hash,
    chain_from,
    chain_hash,
    ck,
    conv_key,
    decode_body,
    decode_conversation,
    encode_body,
    encode_conversation,
    encode_erased_body,
    entry_key_of,
    erased_digest,
    is_erased_value,
    key_seq,
    link,
    rule_of,
    seq_key,
    split_value,
)
from eventlog.entries import ERASABLE_KINDS, CompactionInfo, DurableStepInfo, Kind, RecallInfo, encode_info
from eventlog.errors import (
    ConversationShreddedError,
    EncryptionSetupError,
    KeyMissingError,
    MissingExtraError,
    PayloadMovedError,
    UnsealedPayloadError,
    WrongKeyError,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from eventlog._storage import ReadTxn, WriteTxn

__all__ = [
    'CACHED_KEYS',
    'META_ENCRYPTION',
    'SCHEME',
    'SEALED_KINDS',
    'SEAL_OVERHEAD',
    'SHREDDED_METADATA_KEY',
    'SHREDDED_TEXT',
    'FileKeyProvider',
    'KeyProvider',
    'SealedTxn',
    'Sealer',
    'check_sealed',
    'encrypt_entries',
    'is_sealed',
    'key_fingerprint',
    'seal_body',
    'seal_problem',
]

SCHEME: Final = 'aes-256-gcm/1'
"""The sealing scheme an encrypted store records in META (`META_ENCRYPTION`)."""

META_ENCRYPTION: Final = b'encryption'
"""The META key marking a store encrypted: JSON `{"scheme": ..., "store_id": ...}`, written when
the store is created (or migrated by `eventlog encrypt`) and never removed."""

SEALED_KINDS: Final[frozenset[Kind]] = ERASABLE_KINDS
"""Kinds whose payload is sealed: those holding message content (the same kinds `erase` empties).
Other entries (run starts and ends, titles, forks, erasures, shreds, tool effects) stay in clear,
so `verify` can rebuild every record without a key."""

SHREDDED_TEXT: Final = '[shredded: the content of this conversation was destroyed by shred entry {seq}]'
"""The text a shredded conversation's messages replay with (`{seq}`: the `shred` entry's seq)."""

SHREDDED_METADATA_KEY: Final = 'eventlog_shredded'
"""The placeholder message's `metadata` key; its value is the `shred` entry's seq."""

_MAGIC: Final = b'\xffE1'
"""The first bytes of a sealed payload (no JSON payload starts with 0xff)."""
_NONCE: Final = 12
_FINGERPRINT: Final = 4
_TAG: Final = 16
_HEADER: Final = len(_MAGIC) + 1 + _FINGERPRINT + _NONCE
SEAL_OVERHEAD: Final = _HEADER + _TAG
"""Bytes a sealed payload has beyond its plaintext: magic, role, key fingerprint, nonce, tag."""
SEAL_MARK_SIZE: Final = len(_MAGIC)
"""How many leading bytes of a payload `is_sealed` reads (a reader that clips payloads keeps at least these)."""

CACHED_KEYS: Final = 4096
"""Data keys a handle keeps unwrapped in memory (the most recently used): a process serving many
conversations fetches the others from the provider again rather than holding every key it met."""

_ROLES: Final = {'request': b'q', 'response': b'r'}
_NO_ROLE: Final = b'-'


class _Role(msgspec.Struct):
    kind: str = ''


_role_decoder = msgspec.json.Decoder(_Role)


def _aesgcm(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise MissingExtraError(
            "an encrypted store needs the 'cryptography' package: install the extra 'encryption' "
            "(in a clone of this repository: pip install '.[encryption]')"
        ) from None
    return AESGCM(key)


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def is_sealed(payload: bytes) -> bool:
    """Whether a stored payload is sealed (its first bytes are the sealing mark)."""
    return payload[:3] == _MAGIC


def seal_problem(encrypted: bool, kind: str, payload: bytes) -> str | None:
    """What breaks the sealing rule in an entry's stored payload, or `None`: every content entry
    (`SEALED_KINDS`, erased ones included) of an encrypted store is sealed, and no payload of a
    plain store is. The one owner of the rule: `check_sealed` (reads and exports) and `verify`
    ask it."""
    if encrypted:
        if kind in SEALED_KINDS and not is_sealed(payload):
            return (
                f'the {kind} entry of an encrypted store holds a payload that is not sealed: it was written '
                'around the seal (the store was altered)'
            )
    elif is_sealed(payload):
        return 'the entry holds a sealed payload but the store records no encryption (its record was removed)'
    return None


def check_sealed(seq: int, conversation_id: str, kind: str, payload: bytes) -> None:
    """An encrypted store's entry as read: `UnsealedPayloadError` when it breaks the sealing rule
    (`seal_problem`), so it is never shown as if it were genuine."""
    problem = seal_problem(True, kind, payload)
    if problem is not None:
        raise UnsealedPayloadError(f'entry {seq} of conversation {conversation_id!r}: {problem}; run verify')


def key_fingerprint(payload: bytes) -> bytes:
    """The fingerprint of the data key a sealed payload was sealed with (stored beside it)."""
    return payload[4 : 4 + _FINGERPRINT]


def _fingerprint(key: bytes) -> bytes:
    return hashlib.sha256(b'eventlog data key\x00' + key).digest()[:_FINGERPRINT]


def _associated(store_id: str, seq: int, conversation_id: str) -> bytes:
    return store_id.encode() + b'\x00' + seq_key(seq) + conversation_id.encode()


# --- key providers ----------------------------------------------------------------------------


@runtime_checkable
class KeyProvider(Protocol):
    """Where an encrypted store's data keys live: one random 256-bit key per (store, conversation),
    held outside the store, wrapped by a key-encryption key the provider keeps.

    Destroying a key must be durable when `destroy` returns: that is what makes a shred reach every
    copy of the store (docs/encryption.md, "Where the keys live").

    A provider may also answer `destroyed(store_id, conversation_id) -> bool`: whether it destroyed
    that key itself (`FileKeyProvider` does). `shred` refuses a provider that does not hold the key
    the conversation's payloads were sealed with, unless it answers so: then a shred interrupted
    after destroying the key is finished by shredding again.
    """

    def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
        """The conversation's data key; with `create`, a new random one made (durably) when it has
        none. `None` when it has none and `create` is false (never made, or destroyed).
        Raises `WrongKeyError` when a held key cannot be unwrapped."""
        ...

    def destroy(self, store_id: str, conversation_id: str) -> bool:
        """Destroy the conversation's data key for good; whether one was held."""
        ...


class FileKeyProvider:
    """A keyring directory: the key-encryption key (`kek`, 32 random bytes, mode 0600) and one file
    per conversation under `keys/` holding its data key wrapped (AES-GCM) by the key-encryption key.

    `FileKeyProvider.create(path)` (or `eventlog keygen --encryption PATH`) makes a keyring. With
    `kek`, the key-encryption key is taken from the caller (say, a secret manager) instead of the
    keyring's `kek` file, which may then be absent. Creating a key is atomic across processes (the
    first one linked in wins); destroying one overwrites its file, removes it and syncs the directory.
    """

    def __init__(self, path: str | os.PathLike[str], *, kek: bytes | None = None) -> None:
        self.path = Path(path)
        self._dir = self.path / 'keys'
        if not self._dir.is_dir():
            raise EncryptionSetupError(
                f'{self.path} is not a keyring (make one with: eventlog keygen --encryption PATH)'
            )
        if kek is None:
            try:
                kek = (self.path / 'kek').read_bytes()
            except OSError as exc:
                raise EncryptionSetupError(
                    f'cannot read the key-encryption key {self.path / "kek"}: {exc.strerror or exc}'
                ) from None
        if len(kek) != 32:
            raise EncryptionSetupError(f'the key-encryption key must be 32 bytes, got {len(kek)}')
        self._kek = _aesgcm(kek)
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> FileKeyProvider:
        """Make a new keyring at `path` (a directory that must not exist yet) with a fresh
        key-encryption key; `EncryptionSetupError` when `path` exists."""
        where = Path(path)
        try:
            where.mkdir(mode=0o700)
        except FileExistsError:
            raise EncryptionSetupError(f'{where} exists; a new keyring needs a path that does not') from None
        except OSError as exc:
            raise EncryptionSetupError(f'cannot create the keyring {where}: {exc.strerror or exc}') from None
        (where / 'keys').mkdir(mode=0o700)
        _write_durably(where / 'kek', secrets.token_bytes(32))
        _sync_dir(where)
        return cls(where)

    def _file(self, store_id: str, conversation_id: str) -> Path:
        name = hashlib.sha256(f'{store_id}\x00{conversation_id}'.encode()).hexdigest()
        return self._dir / f'{name}.key'

    @staticmethod
    def _ad(store_id: str, conversation_id: str) -> bytes:
        return f'eventlog keyring\x00{store_id}\x00{conversation_id}'.encode()

    def _unwrap(self, raw: bytes, store_id: str, conversation_id: str) -> bytes:
        try:
            _, _, nonce, wrapped = msgspec.msgpack.decode(raw, type=tuple[str, str, bytes, bytes])
            # Unwrapped under the identity asked for, not the one the file names: a key file
            # copied over another conversation's fails here instead of serving its key.
            return self._kek.decrypt(nonce, wrapped, self._ad(store_id, conversation_id))
        except (msgspec.DecodeError, ValueError, _invalid_tag()):
            raise WrongKeyError(
                f'the data key of conversation {conversation_id!r} in {self.path} cannot be unwrapped '
                'with this key-encryption key (another keyring, or a key file copied from another conversation)'
            ) from None

    def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
        """See `KeyProvider.data_key`."""
        path = self._file(store_id, conversation_id)
        try:
            return self._unwrap(path.read_bytes(), store_id, conversation_id)
        except FileNotFoundError:
            if not create:
                return None
        path.with_suffix('.destroyed').unlink(missing_ok=True)  # a new key of a reused conversation id
        key = secrets.token_bytes(32)
        nonce = secrets.token_bytes(_NONCE)
        wrapped = self._kek.encrypt(nonce, key, self._ad(store_id, conversation_id))
        temp = path.with_name(f'.{path.name}.{os.getpid()}.{secrets.token_hex(4)}')
        _write_durably(temp, msgspec.msgpack.encode((store_id, conversation_id, nonce, wrapped)))
        try:
            os.link(temp, path)  # atomic: fails when another process made the key first
        except FileExistsError:
            return self._unwrap(path.read_bytes(), store_id, conversation_id)
        finally:
            temp.unlink(missing_ok=True)
        _sync_dir(self._dir)
        return key

    def destroy(self, store_id: str, conversation_id: str) -> bool:
        """See `KeyProvider.destroy`: an empty `.destroyed` file is left in its place (see
        `destroyed`), then the key file is overwritten with zeros and synced, removed, and the
        directory synced (on a copy-on-write file system or an SSD the old blocks may survive the
        overwrite; they hold the key wrapped, never in clear)."""
        path = self._file(store_id, conversation_id)
        with self._lock:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                return False
            try:
                os.close(os.open(path.with_suffix('.destroyed'), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
                _sync_dir(self._dir)
                size = os.fstat(fd).st_size
                os.write(fd, b'\x00' * size)
                os.fsync(fd)
            finally:
                os.close(fd)
            path.unlink(missing_ok=True)
            _sync_dir(self._dir)
            return True

    def destroyed(self, store_id: str, conversation_id: str) -> bool:
        """Whether this keyring destroyed the conversation's data key (and made none since)."""
        return self._file(store_id, conversation_id).with_suffix('.destroyed').exists()

    def held(self) -> Iterator[tuple[str, str, bytes]]:
        """Every data key the keyring still holds, unwrapped: (store id, conversation id, key)."""
        for path in sorted(self._dir.glob('*.key')):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            store_id, conversation_id, _, _ = msgspec.msgpack.decode(raw, type=tuple[str, str, bytes, bytes])
            yield store_id, conversation_id, self._unwrap(raw, store_id, conversation_id)


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- sealing ----------------------------------------------------------------------------------


class Sealer:
    """An encrypted store's sealing state for one handle: its id, its key provider (`None` for a
    handle opened without one, which reads records and verifies but opens no payload) and the data
    keys it fetched."""

    def __init__(self, store_id: str, provider: KeyProvider | None) -> None:
        self.store_id = store_id
        self.provider = provider
        self._ciphers: collections.OrderedDict[str, tuple[AESGCM, bytes]] = collections.OrderedDict()
        self._ciphers_lock = threading.Lock()

    def _provider(self, conversation_id: str) -> KeyProvider:
        if self.provider is None:
            raise KeyMissingError(
                f'conversation {conversation_id!r} is encrypted and this store was opened without its keys '
                '(keys=..., or --keys on the command line)'
            )
        return self.provider

    def _cipher(
        self, conversation_id: str, *, create: bool, recorded: Callable[[], bytes | None] | None = None
    ) -> tuple[AESGCM, bytes]:
        with self._ciphers_lock:
            found = self._ciphers.get(conversation_id)
            if found is not None:
                self._ciphers.move_to_end(conversation_id)
                return found
        provider = self._provider(conversation_id)
        # A new data key only for a conversation that has none yet: one whose payloads were sealed
        # already keeps its key, and a provider lacking it (or holding another) is the wrong one.
        held = None if not create or recorded is None else recorded()
        key = provider.data_key(self.store_id, conversation_id, create=create and held is None)
        if held is not None:
            self._check_own(conversation_id, key, held, 'nothing was written')
        if key is None:
            raise KeyMissingError(f'the key provider holds no data key for conversation {conversation_id!r}')
        found = (_aesgcm(key), _fingerprint(key))
        with self._ciphers_lock:
            self._ciphers[conversation_id] = found
            while len(self._ciphers) > CACHED_KEYS:
                self._ciphers.popitem(last=False)  # the least recently used; fetched again when needed
        return found

    def _check_own(self, conversation_id: str, key: bytes | None, held: bytes, outcome: str) -> None:
        """`KeyMissingError` or `WrongKeyError` unless `key` is the one whose fingerprint the
        conversation's sealed payloads carry (`held`); `outcome` says what was not done."""
        if key is None:
            raise KeyMissingError(
                f'conversation {conversation_id!r} already has a data key and the key provider does not hold it '
                f'(another keyring?): {outcome}; use the keyring its content was sealed with'
            )
        if _fingerprint(key) != held:
            raise WrongKeyError(
                f'the key provider holds another data key for conversation {conversation_id!r} than the one its '
                f'content was sealed with (another keyring?): {outcome}'
            )

    def check_own_key(self, conversation_id: str, held: bytes | None) -> None:
        """Before destroying a conversation's key (`shred`): the provider must hold the key its
        payloads were sealed with (`held`, their fingerprint; `None` when none is sealed), else
        `KeyMissingError` or `WrongKeyError`. A provider that lacks it because it destroyed it
        itself (a shred interrupted after that, see `KeyProvider`) passes, so shredding again
        finishes the job."""
        provider = self._provider(conversation_id)
        key = provider.data_key(self.store_id, conversation_id, create=False)
        if held is None:
            return
        if key is None:
            destroyed = getattr(provider, 'destroyed', None)
            if destroyed is not None and cast('Callable[[str, str], bool]', destroyed)(self.store_id, conversation_id):
                return
        self._check_own(conversation_id, key, held, 'nothing was shredded')

    def forget(self, conversation_id: str) -> None:
        """Drop the cached data key of a conversation (after it was destroyed)."""
        with self._ciphers_lock:
            self._ciphers.pop(conversation_id, None)

    def seal(
        self,
        seq: int,
        conversation_id: str,
        kind: str,
        payload: bytes,
        *,
        recorded: Callable[[], bytes | None] | None = None,
    ) -> bytes:
        """The stored form of an entry's payload: sealed under its conversation's data key with the
        entry's identity as associated data. The one place a payload is sealed: every writer of a
        body calls it (through `seal_body`). `recorded` gives the fingerprint of the key the
        conversation's payloads were sealed with (`None`: none is); a new key is made only then,
        and a provider lacking that key, or holding another, raises `KeyMissingError` or
        `WrongKeyError` instead of sealing under a second key."""
        cipher, fingerprint = self._cipher(conversation_id, create=True, recorded=recorded)
        role = _NO_ROLE
        if kind == 'message':
            try:
                role = _ROLES.get(_role_decoder.decode(payload).kind, _NO_ROLE)
            except msgspec.DecodeError:
                role = _NO_ROLE
        nonce = secrets.token_bytes(_NONCE)
        sealed = cipher.encrypt(nonce, payload, _associated(self.store_id, seq, conversation_id))
        return _MAGIC + role + fingerprint + nonce + sealed

    def open(self, seq: int, conversation_id: str, stored: bytes) -> bytes:
        """The plaintext of a sealed payload; `KeyMissingError`, `WrongKeyError` or `PayloadMovedError`."""
        cipher, fingerprint = self._cipher(conversation_id, create=False)
        if key_fingerprint(stored) != fingerprint:
            raise WrongKeyError(
                f'entry {seq} was sealed with another data key than the one the provider holds for '
                f'conversation {conversation_id!r} (another keyring, or a payload moved from another conversation)'
            )
        nonce = stored[_HEADER - _NONCE : _HEADER]
        try:
            return cipher.decrypt(nonce, stored[_HEADER:], _associated(self.store_id, seq, conversation_id))
        except _invalid_tag():
            raise PayloadMovedError(
                f'the sealed payload stored at entry {seq} does not belong to it (moved from another entry, '
                'or altered); run verify'
            ) from None


def seal_body(txn: ReadTxn, body: StoredBody) -> StoredBody:
    """`body` as an encrypted store stores it: its payload sealed when its kind holds content
    (`Sealer.seal`), after checking its conversation was not shredded. A plain store's `txn`
    (no `sealer`) gets `body` back unchanged."""
    sealer: Sealer | None = getattr(txn, 'sealer', None)
    if sealer is None:
        return body
    view = cast('SealedTxn', txn)
    if body.kind != 'deleted':
        view.refuse_shredded(body.conversation_id)
    if body.kind not in SEALED_KINDS:
        return body
    sealed = sealer.seal(
        body.seq,
        body.conversation_id,
        body.kind,
        body.payload,
        recorded=lambda: view.key_fingerprint_of(body.conversation_id),
    )
    return msgspec.structs.replace(body, payload=sealed)


def read_store_id(txn: ReadTxn) -> str | None:
    """The id of an encrypted store (META), or `None` for a plain one."""
    raw = txn.get(Table.META, META_ENCRYPTION)
    if raw is None:
        return None
    try:
        info = json.loads(raw)
        store_id = info['store_id']
        scheme = info['scheme']
    except (ValueError, KeyError, TypeError):
        raise EncryptionSetupError('the store records an encryption setting that cannot be read; run verify') from None
    if scheme != SCHEME or not isinstance(store_id, str):
        raise EncryptionSetupError(f'the store is encrypted with {scheme!r}, which this version does not know')
    return store_id


_ERASED_SEALED: Final = 'erased_sealed'
"""The key of the encryption record saying every erased entry's placeholder is sealed: absent in
stores encrypted by an `eventlog encrypt` of an earlier version, which kept them in clear."""


def mark_encrypted(txn: WriteTxn) -> str:
    """Record in META that the store is encrypted, with a fresh store id; return the id."""
    store_id = secrets.token_hex(16)
    record = {'scheme': SCHEME, 'store_id': store_id, _ERASED_SEALED: True}
    txn.put(Table.META, META_ENCRYPTION, json.dumps(record).encode())
    return store_id


def erased_placeholders_sealed(txn: ReadTxn) -> bool:
    """Whether an encrypted store's record says its erased entries' placeholders are all sealed
    (else `seal_erased_placeholders` migrates it)."""
    raw = txn.get(Table.META, META_ENCRYPTION)
    try:
        return raw is None or json.loads(raw).get(_ERASED_SEALED) is True
    except (ValueError, AttributeError):
        return False


class _Discarded:
    """A provider of one random data key that nobody keeps: what a placeholder of a shredded
    conversation is sealed with when it must be sealed after its key was destroyed."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
        return self._key

    def destroy(self, store_id: str, conversation_id: str) -> bool:
        return False


def seal_erased_placeholders(txn: WriteTxn, sealer: Sealer) -> int:
    """Migrate a store encrypted by an `eventlog encrypt` of an earlier version, which left the
    placeholders of entries erased before it in clear: seal them (a shredded conversation's under
    a key nobody keeps), adjust their conversations' sizes and record it (`_ERASED_SEALED`) so it
    runs once. Only the placeholder `erase` writes is sealed: anything else found in an erased slot
    stays as it is, for `verify` to report. The chain does not change (an erased entry's link comes
    from its stored hash or, in format 4, the digest it keeps). Returns how many placeholders were
    sealed."""
    from eventlog._erase import placeholder_erasure  # `_erase` imports this module

    if erased_placeholders_sealed(txn):
        return 0
    view = SealedTxn(txn, sealer)
    discarded = Sealer(sealer.store_id, _Discarded())
    grown: dict[str, int] = {}
    for key, value in list(txn.scan(Table.ENTRIES)):
        if not is_erased_value(value):
            continue
        seq = key_seq(key)
        body = decode_body(seq, value)
        conv_id = body.conversation_id
        if body.kind not in SEALED_KINDS or is_sealed(body.payload):
            continue
        if placeholder_erasure(body.kind, body.payload) is None:
            continue  # not the placeholder erase writes: left as it is, for verify to report (never sealed)
        if view.shredded_by(conv_id) is not None:
            payload = discarded.seal(seq, conv_id, body.kind, body.payload)
        else:
            payload = sealer.seal(
                seq, conv_id, body.kind, body.payload, recorded=lambda c=conv_id: view.key_fingerprint_of(c)
            )
        body = msgspec.structs.replace(body, payload=payload)
        txn.put(Table.ENTRIES, key, encode_erased_body(body, erased_digest(value)) + split_value(value)[1])
        grown[conv_id] = grown.get(conv_id, 0) + SEAL_OVERHEAD
    for conv_id, extra in grown.items():
        raw = txn.get(Table.CONVS, conv_key(conv_id))
        if raw is not None:
            conv = decode_conversation(conv_id, raw)
            if not conv.deleted:
                conv.payload_bytes += extra
                txn.put(Table.CONVS, conv_key(conv_id), encode_conversation(conv))
    record = json.loads(txn.get(Table.META, META_ENCRYPTION) or b'{}')
    record[_ERASED_SEALED] = True
    txn.put(Table.META, META_ENCRYPTION, json.dumps(record).encode())
    return sum(grown.values()) // SEAL_OVERHEAD


def encrypt_entries(txn: WriteTxn, provider: KeyProvider) -> tuple[str, int]:
    """Make a plain store encrypted inside one write transaction (`eventlog encrypt`): record it
    encrypted, seal every content payload in place and recompute every chain over the sealed bytes
    and every conversation's head and size. Returns the new store id and how many payloads were
    sealed. All or nothing: the caller's transaction aborts on any error, the store then unchanged.

    An erased entry keeps its stored hash (its original hash cannot be recomputed; the chain goes
    on from it as `verify` checks it) and has its placeholder sealed like any content payload.
    """
    from eventlog._admin import mark_scrub_pending
    from eventlog._read import last_seq

    if read_store_id(txn) is not None:
        raise EncryptionSetupError('the store is encrypted already')
    store_id = mark_encrypted(txn)
    sealer = Sealer(store_id, provider)
    heads: dict[str, bytes] = {}
    first_rule_2 = chain_from(txn)
    grown: dict[str, int] = {}
    sealed = 0
    updates: list[tuple[bytes, bytes]] = []
    for key, value in txn.scan(Table.ENTRIES):
        seq = key_seq(key)
        body = decode_body(seq, value)
        conv_id = body.conversation_id
        prev = b'' if body.kind == 'deleted' else heads.get(conv_id, b'')
        hashed, stored_hash = split_value(value)
        rule = rule_of(seq, first_rule_2)
        if is_erased_value(value):
            # Rule 1: the stored hash is taken as given; rule 2: the link follows from the kept digest.
            digest = link(prev, value, rule=rule) or stored_hash
            heads[conv_id] = digest
            if body.kind in SEALED_KINDS:
                body = msgspec.structs.replace(body, payload=sealer.seal(seq, conv_id, body.kind, body.payload))
                updates.append((key, encode_erased_body(body, erased_digest(value)) + digest))
                grown[conv_id] = grown.get(conv_id, 0) + SEAL_OVERHEAD
            elif digest != stored_hash:
                updates.append((key, hashed + digest))
            continue
        if body.kind in SEALED_KINDS:
            body = msgspec.structs.replace(body, payload=sealer.seal(seq, conv_id, body.kind, body.payload))
            hashed = encode_body(body)
            grown[conv_id] = grown.get(conv_id, 0) + SEAL_OVERHEAD
            sealed += 1
        digest = chain_hash(prev, hashed) if rule == 1 else append_hash(prev, hashed)
        heads[conv_id] = digest
        if digest != stored_hash:
            updates.append((key, hashed + digest))
    for key, value in updates:
        txn.put(Table.ENTRIES, key, value)
    for key, raw in list(txn.scan(Table.CONVS)):
        conv_id = key.decode()
        conv = decode_conversation(conv_id, raw)
        conv.head_hash = heads.get(conv_id, conv.head_hash)
        if not conv.deleted:
            conv.payload_bytes += grown.get(conv_id, 0)
        txn.put(Table.CONVS, key, encode_conversation(conv))
    if sealed:
        mark_scrub_pending(txn, last_seq(txn))  # the clear payloads stay in the files until rewritten
    return store_id, sealed


# --- reading through the seal -----------------------------------------------------------------


class SealedTxn:
    """A transaction of an encrypted store as the engine sees it: ENTRIES values come out with
    their payloads opened (a shredded conversation's as placeholders), every other read and every
    write goes through unchanged. `raw` is the transaction underneath (what `verify` reads)."""

    def __init__(self, txn: ReadTxn, sealer: Sealer) -> None:
        self.raw = txn
        self.sealer = sealer
        self._shredded: dict[str, int | None] = {}

    def __getattr__(self, name: str) -> Any:
        """Any other method of the transaction underneath; those that return ENTRIES values
        (`scan_settled`, `get_many`) open them too."""
        attr = getattr(self.raw, name)
        if name == 'scan_settled':
            settled = cast('Callable[[bytes], Iterator[tuple[bytes, bytes]]]', attr)

            def scan_settled(start: bytes) -> Iterator[tuple[bytes, bytes]]:
                return self._opened(settled(start))

            return scan_settled
        if name == 'get_many':  # PostgreSQL: several keys in one round trip
            many = cast('Callable[[TableId, list[bytes]], list[bytes | None]]', attr)

            def get_many(table: TableId, keys: list[bytes]) -> list[bytes | None]:
                values = many(table, keys)
                if table != Table.ENTRIES:
                    return values
                return [None if v is None else self.open_value(k, v) for k, v in zip(keys, values, strict=True)]

            return get_many
        return attr

    def shredded_by(self, conversation_id: str) -> int | None:
        """The seq of the `shred` entry that ended the conversation, or `None` (read once per transaction)."""
        if conversation_id in self._shredded:
            return self._shredded[conversation_id]
        found: int | None = None
        raw = self.raw.get(Table.CONVS, conv_key(conversation_id))
        if raw is not None:
            conv = decode_conversation(conversation_id, raw)
            value = self.raw.get(Table.ENTRIES, seq_key(conv.last_seq))
            if value is not None and decode_body(conv.last_seq, value).kind == 'shred':
                found = conv.last_seq
        self._shredded[conversation_id] = found
        return found

    def refuse_shredded(self, conversation_id: str) -> None:
        """`ConversationShreddedError` when the conversation was shredded."""
        seq = self.shredded_by(conversation_id)
        if seq is not None:
            raise ConversationShreddedError(
                f'conversation {conversation_id!r} was shredded (entry {seq}); nothing more can be appended to it'
            )

    def key_fingerprint_of(self, conversation_id: str) -> bytes | None:
        """The fingerprint of the data key the conversation's payloads were sealed with (its first
        sealed entry's), or `None` when none of its entries is sealed (its key is not made yet)."""
        prefix = ck(conversation_id)
        for index_key, _ in self.raw.scan(Table.BY_CONV, prefix=prefix):
            if len(index_key) != len(prefix) + SEQ_SIZE:
                continue
            value = self.raw.get(Table.ENTRIES, entry_key_of(index_key))
            if value is None:
                continue
            payload = decode_body(key_seq(index_key), value).payload
            if is_sealed(payload):
                return key_fingerprint(payload)
        return None

    def note_appended(self, conversation_id: str, seq: int, kind: str) -> None:
        """Keep the shredded state current after this transaction appended an entry."""
        self._shredded[conversation_id] = seq if kind == 'shred' else None

    def open_value(self, key: bytes, value: bytes) -> bytes:
        """An ENTRIES value with its payload opened (unchanged when it holds no sealed payload)."""
        seq = key_seq(key)
        body = decode_body(seq, value)
        if not is_sealed(body.payload):
            check_sealed(seq, body.conversation_id, body.kind, body.payload)
            return value
        shred = self.shredded_by(body.conversation_id)
        if shred is not None:
            plain = shredded_payload(body.kind, body.payload[3:4], shred)
        else:
            plain = self.sealer.open(seq, body.conversation_id, body.payload)
        opened = msgspec.structs.replace(body, payload=plain)
        digest = split_value(value)[1]
        if is_erased_value(value):
            return encode_erased_body(opened, erased_digest(value)) + digest
        return encode_body(opened) + digest

    def _opened(self, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for key, value in items:
            yield key, self.open_value(key, value)

    def get(self, table: TableId, key: bytes) -> bytes | None:
        value = self.raw.get(table, key)
        if value is None or table != Table.ENTRIES:
            return value
        return self.open_value(key, value)

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        items = self.raw.scan(table, prefix=prefix, start=start, reverse=reverse)
        return items if table != Table.ENTRIES else self._opened(items)

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        item = self.raw.last(table, prefix)
        if item is None or table != Table.ENTRIES:
            return item
        return item[0], self.open_value(*item)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        cast('WriteTxn', self.raw).put(table, key, value)

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        cast('WriteTxn', self.raw).put_last(table, key, value)

    def delete(self, table: TableId, key: bytes) -> None:
        cast('WriteTxn', self.raw).delete(table, key)


@functools.lru_cache(maxsize=64)
def shredded_payload(kind: str, role: bytes, shred_seq: int) -> bytes:
    """What a shredded conversation's sealed payload reads as: a placeholder of its kind. A message
    keeps its role (request or response, stored in clear beside the sealed bytes); nothing else of
    it is known without the key."""
    text = SHREDDED_TEXT.format(seq=shred_seq)
    if kind == 'compaction':
        return encode_info(CompactionInfo(replaced=[], summary=[msgspec.Raw(_placeholder(b'r', text, shred_seq))]))
    if kind == 'durable_step':
        return encode_info(DurableStepInfo(step=0, name=text))
    if kind == 'recall':
        return encode_info(RecallInfo(query=text, mode='', hits=[], text=text, tokens=0, max_tokens=0))
    return _placeholder(role, text, shred_seq)


def _placeholder(role: bytes, text: str, shred_seq: int) -> bytes:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from eventlog.entries import encode_message

    metadata = {SHREDDED_METADATA_KEY: shred_seq}
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    if role == b'q':
        return encode_message(
            ModelRequest(parts=[UserPromptPart(content=text, timestamp=epoch)], timestamp=epoch, metadata=metadata)
        )
    return encode_message(ModelResponse(parts=[TextPart(content=text)], timestamp=epoch, metadata=metadata))
