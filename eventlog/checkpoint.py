"""Signed checkpoints: a signed statement of every conversation's chain head, kept outside the store.

The hash chains catch accidental damage and naive edits, but whoever can write the store can
rewrite a whole chain and recompute every hash. A checkpoint closes that gap: it records the head
(last `seq` and last hash) of every conversation, a store-wide head, and the hash of every entry
appended since the checkpoint before it, and signs all of it with an Ed25519 key. `verify`
given checkpoints and the public key then compares the stored hashes with the signed ones:
an entry altered, removed, reordered or rewritten after a checkpoint no longer has the hash the
checkpoint signed, and the first such entry of each conversation is named. docs/audit.md
describes the threat model; this module holds the keys, the checkpoint's format and the
comparison, all written over the storage protocol so every backend shares them.

A checkpoint is one JSON line (the same bytes in a checkpoint file and in a signed export):

    {"type":"checkpoint","checkpoint":{...the signed body...},"signature":"<base64>"}

The signature covers the body exactly as `msgspec` encodes `CheckpointBody` (fields in their
declared order, no spaces), so a reader decodes the body and encodes it again to check it.
The store records each checkpoint it made in its META table under `checkpoint/` and the
checkpoint's last `seq` (`recorded_checkpoints`); the next checkpoint lists the entries after it.

`cryptography` (the `audit` extra) is imported only when a key is made, read or used.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from eventlog._files import open_destination
from eventlog._keys import HASH_SIZE, Table, chain_from, ck, decode_conversation, decode_id, key_seq, seq_key
from eventlog._read import assigned_last_seq, last_seq
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.entries import VerifyProblem, VerifyReport
from eventlog.errors import (
    CheckpointAheadError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointSignatureError,
    CorruptStoreError,
    KeyFileError,
    MissingExtraError,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    'CHECKPOINT_FILE_LIMIT',
    'CHECKPOINT_FORMAT',
    'CHECKPOINT_VERSION',
    'KEY_FILE_LIMIT',
    'META_CHECKPOINT_PREFIX',
    'READ_CHECKPOINT_VERSIONS',
    'Checkpoint',
    'CheckpointBody',
    'CheckpointHead',
    'CheckpointSource',
    'Comparison',
    'PublicKey',
    'PublicKeySource',
    'SignedExport',
    'Signer',
    'SignerSource',
    'as_public_key',
    'as_signer',
    'check_not_ahead',
    'compare_chain_from',
    'compare_store',
    'load_checkpoints',
    'make_checkpoint',
    'recorded_checkpoints',
    'signed_trailer',
    'store_head_of',
    'verify_export',
    'verify_signatures',
    'write_key_pair',
]

CHECKPOINT_FORMAT: Final = 'pydantic-ai-eventlog-checkpoint'
"""The `format` every checkpoint body names."""
CHECKPOINT_VERSION: Final = 2
"""The checkpoint layout this code writes. Version 2 adds `chain_from`; version 1 is read too."""
READ_CHECKPOINT_VERSIONS: Final = (1, 2)
"""Every checkpoint version this code reads."""
META_CHECKPOINT_PREFIX: Final = b'checkpoint/'
"""META keys of the checkpoints a store recorded: this prefix and the checkpoint's last `seq` (seq8)."""
_SIGNATURE_SIZE: Final = 64
_HEX_HASH: Final = HASH_SIZE * 2


def _crypto_missing() -> MissingExtraError:
    return MissingExtraError(
        "signed checkpoints need the 'cryptography' package: install the extra 'audit' "
        "(in a clone of this repository: pip install '.[audit]')"
    )


# --- keys -------------------------------------------------------------------------------------


KEY_FILE_LIMIT: Final = 64 * 1024
"""The most bytes read from a key file: a PEM Ed25519 key takes about 120 (no key file is larger)."""


CHECKPOINT_FILE_LIMIT: Final = 1 << 30
"""The most bytes read from a checkpoint file (`Checkpoint.read`): a checkpoint lists one head per
conversation, about 150 bytes each, so this allows some seven million conversations."""
_CHECKPOINT_HEAD: Final = 4096
"""Bytes read first to tell a checkpoint (a JSON object) from another file."""


def _read_key_file(path: str | os.PathLike[str], *, private: bool = False) -> bytes:
    """The bytes of a key file, at most `KEY_FILE_LIMIT` of them read whatever it is (`/dev/zero`, a
    sparse file); a `private` key in a regular file that others may read or write is refused, as
    ssh refuses it."""
    try:
        with open(path, 'rb') as fh:
            mode = os.fstat(fh.fileno()).st_mode
            data = fh.read(KEY_FILE_LIMIT + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise KeyFileError(f'cannot read the key file {path}: {getattr(exc, "strerror", None) or exc}') from None
    if len(data) > KEY_FILE_LIMIT:
        raise KeyFileError(f'the key file {path} is not a key: it holds more than {KEY_FILE_LIMIT} bytes')
    exposed = stat.S_ISREG(mode) and mode & 0o077 and os.name == 'posix'
    if private and exposed and b'PRIVATE KEY' in data:
        raise KeyFileError(
            f'the private key file {path} is open to others (mode {stat.S_IMODE(mode):04o}); '
            f'a signing key must be readable by its owner only: chmod 600 {path}'
        )
    return data


class PublicKey:
    """An Ed25519 public key: checks checkpoint signatures. `fingerprint` names it in checkpoints."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        """Wrap a `cryptography` Ed25519 public key."""
        self._key = key
        self.raw: bytes = _raw_public(key)
        """The key's 32 bytes."""
        self.fingerprint: str = 'ed25519:' + hashlib.sha256(self.raw).hexdigest()
        """`ed25519:` and the SHA-256 (hex) of the key's 32 bytes."""

    @classmethod
    def from_pem(cls, data: bytes, *, source: str = 'the key') -> PublicKey:
        """The public key in PEM `data`: a public key, or the public half of a private key."""
        try:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        except ImportError:
            raise _crypto_missing() from None
        if b'PRIVATE KEY' in data:
            return Signer.from_pem(data, source=source).public_key
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f'{source} is not a PEM public key ({_first_line(exc)})') from None
        except Exception as exc:  # UnsupportedAlgorithm and the like
            raise KeyFileError(f'{source} is not a usable public key ({_first_line(exc)})') from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f'{source} is a {type(key).__name__}, not an Ed25519 key')
        return cls(key)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PublicKey:
        """The public key in a PEM file (a public key, or a private key's public half)."""
        return cls.from_pem(_read_key_file(path), source=f'the key file {path}')

    def pem(self) -> bytes:
        """The key as PEM (SubjectPublicKeyInfo)."""
        from cryptography.hazmat.primitives import serialization

        return self._key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def verify(self, signature: bytes, data: bytes) -> bool:
        """Whether `signature` is this key's signature of `data`."""
        from cryptography.exceptions import InvalidSignature

        try:
            self._key.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    def __repr__(self) -> str:
        return f'PublicKey({self.fingerprint})'


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Signer:
    """An Ed25519 private key: signs checkpoints. Keep it away from the store (docs/audit.md)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        """Wrap a `cryptography` Ed25519 private key."""
        self._key = key
        self.public_key: PublicKey = PublicKey(key.public_key())
        """The key that checks this signer's signatures."""

    @classmethod
    def generate(cls) -> Signer:
        """A new random key."""
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        except ImportError:
            raise _crypto_missing() from None
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, *, source: str = 'the key') -> Signer:
        """The private key in PEM `data` (PKCS#8, unencrypted)."""
        try:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        except ImportError:
            raise _crypto_missing() from None
        if b'PRIVATE KEY' not in data:
            what = 'a public key' if b'PUBLIC KEY' in data else 'not a PEM private key'
            raise KeyFileError(f'{source} is {what}; signing needs the private key (made by `eventlog keygen`)')
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f'{source} is not a usable PEM private key ({_first_line(exc)})') from None
        except Exception as exc:  # UnsupportedAlgorithm and the like
            raise KeyFileError(f'{source} is not a usable private key ({_first_line(exc)})') from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f'{source} is a {type(key).__name__}, not an Ed25519 key')
        return cls(key)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Signer:
        """The private key in a PEM file (refused when others may read or write it)."""
        return cls.from_pem(_read_key_file(path, private=True), source=f'the key file {path}')

    def pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM."""
        from cryptography.hazmat.primitives import serialization

        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature (64 bytes) of `data`."""
        return self._key.sign(data)

    def __repr__(self) -> str:
        return f'Signer({self.public_key.fingerprint})'


SignerSource = Signer | str | os.PathLike[str]
"""A signer, or the path of its PEM private key file."""
PublicKeySource = PublicKey | Signer | str | os.PathLike[str]
"""A public key, a signer (its public half), or the path of a PEM key file."""


def as_signer(source: SignerSource) -> Signer:
    """The `Signer` `source` gives."""
    return source if isinstance(source, Signer) else Signer.from_file(source)


def as_public_key(source: PublicKeySource) -> PublicKey:
    """The `PublicKey` `source` gives."""
    if isinstance(source, PublicKey):
        return source
    if isinstance(source, Signer):
        return source.public_key
    return PublicKey.from_file(source)


def write_key_pair(path: str | os.PathLike[str], *, overwrite: bool = False) -> tuple[Path, Path, Signer]:
    """Make a new key pair: the private key to `path` (PEM, mode 0600) and the public key to
    `path` + `.pub`; return both paths and the signer. Refuses to replace a file unless `overwrite`."""
    signer = Signer.generate()
    private = Path(path)
    public = private.with_name(private.name + '.pub')
    if not overwrite:
        for existing in (private, public):
            if existing.exists() or existing.is_symlink():
                raise KeyFileError(f'{existing} exists; refusing to replace a key (remove it first)')
    try:
        with open_destination(private) as fh:
            fh.write(signer.pem())
        with open_destination(public) as fh:
            fh.write(signer.public_key.pem())
        public.chmod(0o644)
    except OSError as exc:
        raise KeyFileError(f'cannot write the key pair to {path}: {exc.strerror or exc}') from None
    return private, public, signer


# --- the checkpoint ---------------------------------------------------------------------------


class CheckpointHead(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """One conversation in a checkpoint: its head and the hashes of its entries after `since`."""

    conversation_id: str
    seq: int
    """The `seq` of the conversation's last entry (its tombstone, for a deleted one)."""
    hash: str
    """That entry's chain hash (hex)."""
    entries: list[tuple[int, str]]
    """`(seq, hash hex)` of each of its entries after the body's `since`, the head included."""


class CheckpointBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a checkpoint signs."""

    format: str
    version: int
    key: str
    """The signing key's fingerprint (`PublicKey.fingerprint`)."""
    created_at: str
    """When it was made (ISO 8601, UTC)."""
    last_seq: int
    """The store-wide head: the largest `seq` the store had assigned."""
    store_head: str
    """SHA-256 (hex) of every conversation's id, head `seq` and head hash, in id order: one value
    that names the whole state (`store_head_of`)."""
    since: int
    """Entries with a larger `seq` are listed one by one (the previous checkpoint's `last_seq`, or 0)."""
    conversations: list[CheckpointHead]
    """Every conversation the store held, deleted ones (their tombstone) too, in id order."""
    chain_from: int | None = None
    """The store's first `seq` chained by rule 2 (`_keys.link`; version 2, absent in version 1):
    signed, so that the entries whose erased hashes are taken as given cannot be moved."""


class _SignedLine(msgspec.Struct, frozen=True, kw_only=True, tag_field='type', tag='checkpoint'):
    checkpoint: CheckpointBody
    signature: str


class _Header(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The leading fields of a stored entry body (`StoredBody`): decoding stops there, so the
    payload is never copied."""

    seq: int
    conversation_id: str
    run_id: str | None
    kind: str


_header_decoder: Final = msgspec.msgpack.Decoder(_Header)


def _header(seq: int, value: bytes) -> _Header | None:
    """The header of the ENTRIES value at `seq`, or `None` when it cannot be right (verify names it)."""
    if len(value) <= HASH_SIZE:
        return None
    try:
        header = _header_decoder.decode(memoryview(value)[: len(value) - HASH_SIZE])
    except msgspec.DecodeError:
        return None
    return header if header.seq == seq else None


_line_decoder: Final = msgspec.json.Decoder(_SignedLine)
_encoder: Final = msgspec.json.Encoder()


def store_head_of(heads: Iterable[CheckpointHead]) -> str:
    """The store-wide digest of conversation heads (see `CheckpointBody.store_head`)."""
    digest = hashlib.sha256()
    for head in sorted(heads, key=lambda h: ck(h.conversation_id)):
        digest.update(ck(head.conversation_id) + seq_key(head.seq) + bytes.fromhex(head.hash))
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Checkpoint:
    """A signed checkpoint: its body and signature. `write` puts it in a file outside the store."""

    body: CheckpointBody
    signature: bytes

    @property
    def last_seq(self) -> int:
        """The largest `seq` the store had assigned when the checkpoint was made."""
        return self.body.last_seq

    @property
    def key_fingerprint(self) -> str:
        """The fingerprint of the key the checkpoint says signed it (`verify_signature` checks it)."""
        return self.body.key

    @property
    def store_head(self) -> str:
        """The store-wide head digest (hex)."""
        return self.body.store_head

    @property
    def created_at(self) -> str:
        """When it was made (ISO 8601, UTC)."""
        return self.body.created_at

    @property
    def heads(self) -> dict[str, tuple[int, bytes]]:
        """Each conversation's head: `(seq, hash)`."""
        return {h.conversation_id: (h.seq, bytes.fromhex(h.hash)) for h in self.body.conversations}

    @property
    def label(self) -> str:
        """How findings and errors name this checkpoint."""
        return f'the checkpoint of {self.body.created_at} (up to entry #{self.body.last_seq})'

    def signed_bytes(self) -> bytes:
        """The exact bytes the signature covers."""
        return _encoder.encode(self.body)

    def to_bytes(self) -> bytes:
        """The checkpoint as one JSON line, newline included (a checkpoint file's whole content)."""
        line = _SignedLine(checkpoint=self.body, signature=base64.b64encode(self.signature).decode())
        return _encoder.encode(line) + b'\n'

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = 'the checkpoint') -> Checkpoint:
        """Parse and check the form of a checkpoint line; `CheckpointFormatError` when it is not one.

        The signature is only decoded here; `verify_signature` checks it."""
        try:
            line = _line_decoder.decode(data.strip())
        except msgspec.DecodeError as exc:
            raise CheckpointFormatError(f'{source} is not a checkpoint ({_first_line(exc)})') from None
        body = line.checkpoint
        _check_body(body, source)
        try:
            signature = base64.b64decode(line.signature, validate=True)
        except (binascii.Error, ValueError):
            raise CheckpointSignatureError(f'the signature of {source} is garbled (not base64)') from None
        return cls(body, signature)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """The checkpoint in a file written by `write` (or `eventlog checkpoint`)."""
        source = f'the checkpoint file {path}'
        try:
            _require_file(Path(path), 'a checkpoint file')
            with open(path, 'rb') as fh:
                # A checkpoint is one JSON object: a file too big for one, or that does not start
                # as one (a sparse file of zeros, a binary file), is refused before it is read.
                if os.fstat(fh.fileno()).st_size > CHECKPOINT_FILE_LIMIT:
                    raise CheckpointFormatError(
                        f'{source} is not a checkpoint: it holds more than {CHECKPOINT_FILE_LIMIT >> 20} MiB'
                    )
                head = fh.read(_CHECKPOINT_HEAD)
                if head.strip() and not head.lstrip().startswith(b'{'):
                    raise CheckpointFormatError(f'{source} is not a checkpoint (it does not start with a JSON object)')
                data = head + fh.read(CHECKPOINT_FILE_LIMIT + 1 - len(head))
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise CheckpointFormatError(
                f'cannot read the checkpoint file {path}: {getattr(exc, "strerror", None) or exc}'
            ) from None
        if len(data) > CHECKPOINT_FILE_LIMIT:  # it grew while being read
            raise CheckpointFormatError(
                f'{source} is not a checkpoint: it holds more than {CHECKPOINT_FILE_LIMIT >> 20} MiB'
            )
        return cls.from_bytes(data, source=source)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the checkpoint to `path` (a new 0600 file renamed into place when complete); return it."""
        with open_destination(path) as fh:
            fh.write(self.to_bytes())
        return Path(path)

    def verify_signature(self, public_key: PublicKeySource) -> None:
        """Check that `public_key` signed this checkpoint; `CheckpointSignatureError` otherwise."""
        key = as_public_key(public_key)
        if self.body.key != key.fingerprint:
            raise CheckpointSignatureError(
                f'{self.label} was signed by another key ({self.body.key}), not by {key.fingerprint}'
            )
        if len(self.signature) != _SIGNATURE_SIZE:
            raise CheckpointSignatureError(
                f'the signature of {self.label} is truncated or malformed '
                f'({len(self.signature)} bytes, an Ed25519 signature has {_SIGNATURE_SIZE})'
            )
        if not key.verify(self.signature, self.signed_bytes()):
            raise CheckpointSignatureError(
                f'the signature of {self.label} does not match: the checkpoint was altered or signed by another key'
            )


def _check_body(body: CheckpointBody, source: str) -> None:
    def bad(why: str) -> CheckpointFormatError:
        return CheckpointFormatError(f'{source} is malformed: {why}')

    if body.format != CHECKPOINT_FORMAT:
        raise bad(f'its format is {body.format!r}, not {CHECKPOINT_FORMAT!r}')
    if body.version not in READ_CHECKPOINT_VERSIONS:
        raise bad(f'it is of version {body.version}; this version of pydantic-ai-eventlog reads versions 1 and 2')
    first = body.chain_from
    if (first is None) != (body.version == 1) or (first is not None and not 0 < first <= body.last_seq + 1):
        raise bad(f'its chain_from {body.chain_from!r} is impossible for version {body.version}')
    if not 0 <= body.since <= body.last_seq:
        raise bad(f'since {body.since} is not between 0 and its last seq {body.last_seq}')
    previous = b''
    for head in body.conversations:
        key = ck(head.conversation_id)
        if key <= previous:
            raise bad('its conversations are not in id order, or one is listed twice')
        previous = key
        if not (0 < head.seq <= body.last_seq and _is_hash(head.hash)):
            raise bad(f'the head of conversation {head.conversation_id!r} is impossible')
        last = body.since
        for seq, digest in head.entries:
            if not (last < seq <= head.seq and _is_hash(digest)):
                raise bad(f'the entries of conversation {head.conversation_id!r} are out of order or malformed')
            last = seq
        if head.entries and head.entries[-1] != (head.seq, head.hash):
            raise bad(f'the entries of conversation {head.conversation_id!r} do not end at its head')
    if store_head_of(body.conversations) != body.store_head:
        raise bad('its store head does not match its conversations')


def _is_hash(text: str) -> bool:
    if len(text) != _HEX_HASH:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return text == text.lower()


CheckpointSource = Checkpoint | str | os.PathLike[str]
"""A checkpoint, or the path of a checkpoint file."""


def load_checkpoints(sources: Sequence[CheckpointSource]) -> list[Checkpoint]:
    """The checkpoints `sources` give (files are read and their form checked), oldest first."""
    found = [s if isinstance(s, Checkpoint) else Checkpoint.read(s) for s in sources]
    return sorted(found, key=lambda c: c.last_seq)


def verify_signatures(checkpoints: Sequence[Checkpoint], public_key: PublicKeySource) -> PublicKey:
    """Check that `public_key` signed every checkpoint; return the key."""
    key = as_public_key(public_key)
    for checkpoint in checkpoints:
        checkpoint.verify_signature(key)
    return key


# --- making and recording checkpoints (over the storage protocol) -----------------------------


def recorded_checkpoints(txn: ReadTxn) -> list[Checkpoint]:
    """The checkpoints the store recorded, oldest first."""
    out: list[Checkpoint] = []
    for key, value in txn.scan(Table.META, prefix=META_CHECKPOINT_PREFIX):
        seq = key_seq(key) if len(key) == len(META_CHECKPOINT_PREFIX) + 8 else 0
        out.append(Checkpoint.from_bytes(value, source=f'the checkpoint the store recorded at entry #{seq}'))
    return out


def make_checkpoint(txn: WriteTxn, signer: Signer, *, full: bool = False) -> Checkpoint:
    """Sign the store's current heads (and the entries since the last recorded checkpoint, or
    all of them when `full`), record the checkpoint in META, and return it.

    The store keeps one checkpoint per last `seq`: a checkpoint made with no entry appended
    since the previous one replaces it and lists the same entries."""
    last = last_seq(txn)
    since = 0
    if not full:
        previous = txn.last(Table.META, META_CHECKPOINT_PREFIX)
        if previous is not None and len(previous[0]) == len(META_CHECKPOINT_PREFIX) + 8:
            since = min(key_seq(previous[0]), last)
            if since == last:  # no entry since: this one replaces it, so it lists what it listed
                try:
                    since = Checkpoint.from_bytes(previous[1]).body.since
                except CheckpointError:
                    since = 0
    listed: dict[str, list[tuple[int, str]]] = {}
    for key, value in txn.scan(Table.ENTRIES, start=seq_key(since + 1)):
        seq = key_seq(key)
        header = _header(seq, value)
        if header is None:
            raise CorruptStoreError(f'entry {seq} cannot be decoded; run verify before making a checkpoint')
        listed.setdefault(header.conversation_id, []).append((seq, value[-HASH_SIZE:].hex()))
    heads: list[CheckpointHead] = []
    for key, raw in txn.scan(Table.CONVS):
        conversation_id = decode_id(key, 'the conversation record key')
        record = decode_conversation(conversation_id, raw)
        mine = [(seq, digest) for seq, digest in listed.get(conversation_id, []) if seq <= record.last_seq]
        heads.append(CheckpointHead(conversation_id, record.last_seq, record.head_hash.hex(), mine))
    heads.sort(key=lambda h: ck(h.conversation_id))
    body = CheckpointBody(
        format=CHECKPOINT_FORMAT,
        version=CHECKPOINT_VERSION,
        chain_from=chain_from(txn) or 1,
        key=signer.public_key.fingerprint,
        created_at=datetime.now(UTC).isoformat(timespec='microseconds').replace('+00:00', 'Z'),
        last_seq=last,
        store_head=store_head_of(heads),
        since=since,
        conversations=heads,
    )
    checkpoint = Checkpoint(body, signer.sign(_encoder.encode(body)))
    try:
        _check_body(body, 'the new checkpoint')
    except CheckpointFormatError:
        raise CorruptStoreError(
            "the store's conversation records disagree with its entries; run verify before making a checkpoint"
        ) from None
    txn.put(Table.META, META_CHECKPOINT_PREFIX + seq_key(last), checkpoint.to_bytes())
    return checkpoint


def check_not_ahead(checkpoints: Sequence[Checkpoint], store_last_seq: int) -> None:
    """`CheckpointAheadError` when a checkpoint covers entries beyond the store's last `seq`."""
    for checkpoint in checkpoints:
        if checkpoint.last_seq > store_last_seq:
            raise CheckpointAheadError(
                f'{checkpoint.label} covers entries up to #{checkpoint.last_seq}, but the store ends at '
                f'#{store_last_seq}: its latest entries are missing, or the checkpoint is of another store'
            )


# --- comparing a store (or an export) with checkpoints ----------------------------------------


class Comparison:
    """Stored entries compared with what signed checkpoints say, one entry at a time in `seq` order.

    Only stored hashes are compared, never content: `verify` already proves each stored hash
    follows from its entry and the one before it, so an entry whose content was erased (it keeps
    its hash) still matches. Each conversation gets at most one finding, its first entry that
    differs from the checkpointed history:

    - `checkpoint-mismatch`: the entry at a `seq` a checkpoint signed has another hash or
      belongs to another conversation (altered, reordered, or its chain rewritten with new
      hashes); at a head whose entries the checkpoint does not list one by one, an entry at or
      before it differs;
    - `checkpoint-missing`: an entry a checkpoint signed is gone and no later `deleted`
      tombstone of its conversation explains it;
    - `checkpoint-added`: an entry at or before a checkpoint's last `seq` that the checkpoint
      did not have (inserted into the history).
    """

    def __init__(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Prepare to compare with `checkpoints` (their signatures already checked)."""
        self._expected: dict[int, list[tuple[str, bytes, Checkpoint, bool]]] = {}
        self._ordered = sorted(checkpoints, key=lambda c: c.last_seq)
        self._bounds = [c.last_seq for c in self._ordered]
        self._heads = [{h.conversation_id: h.seq for h in c.body.conversations} for c in self._ordered]
        for checkpoint in self._ordered:
            for head in checkpoint.body.conversations:
                listed = bool(head.entries)
                for seq, digest in head.entries or [(head.seq, head.hash)]:
                    self._expected.setdefault(seq, []).append(
                        (head.conversation_id, bytes.fromhex(digest), checkpoint, listed)
                    )
        self._seen: set[int] = set()
        self._tombstones: dict[str, int] = {}
        self._found: dict[str, VerifyProblem] = {}
        self.conversations: set[str] = set()
        """The conversations of the entries observed."""

    def _add(self, conversation_id: str, seq: int, code: str, reason: str) -> None:
        known = self._found.get(conversation_id)
        if known is None or seq < known.seq:
            self._found[conversation_id] = VerifyProblem(conversation_id, seq, reason, code=code)

    def observe(self, seq: int, conversation_id: str, kind: str, stored_hash: bytes) -> None:
        """One stored entry (entries come in `seq` order)."""
        self.conversations.add(conversation_id)
        if kind == 'deleted':
            self._tombstones[conversation_id] = seq
        expected = self._expected.get(seq)
        if expected is not None:
            self._seen.add(seq)
            for conv, digest, checkpoint, listed in expected:
                if conv != conversation_id:
                    self._add(
                        conv,
                        seq,
                        'checkpoint-mismatch',
                        f'entry #{seq} belongs to conversation {conversation_id!r}, but in {checkpoint.label} '
                        f'it was an entry of {conv!r}: the history was reordered or rewritten',
                    )
                elif digest != stored_hash:
                    why = (
                        'the entry differs from the one signed in '
                        if listed
                        else 'the history up to this entry differs from the one signed in '
                    )
                    self._add(
                        conv,
                        seq,
                        'checkpoint-mismatch',
                        why + f'{checkpoint.label}: it was altered, reordered or its chain rewritten',
                    )
            return
        at = bisect.bisect_left(self._bounds, seq)
        if at == len(self._bounds):
            return  # after every checkpoint: nothing to compare with
        checkpoint = self._ordered[at]
        head = self._heads[at].get(conversation_id)
        if head is None or seq > head or seq > checkpoint.body.since:
            self._add(
                conversation_id,
                seq,
                'checkpoint-added',
                f'entry #{seq} was not in the history signed in {checkpoint.label}: it was inserted since',
            )

    def finish(self, scope: set[str] | None = None) -> list[VerifyProblem]:
        """The findings, after every entry was observed; with `scope`, only those conversations
        are expected to be present (a partial export)."""
        for seq in sorted(set(self._expected) - self._seen):
            for conv, _, checkpoint, _ in self._expected[seq]:
                if self._tombstones.get(conv, 0) > seq:
                    continue  # deleted since: the tombstone records it
                if scope is not None and conv not in scope:
                    continue
                self._add(conv, seq, 'checkpoint-missing', f'entry #{seq}, signed in {checkpoint.label}, was removed')
        return sorted(self._found.values(), key=lambda p: (p.conversation_id, p.seq))


def compare_chain_from(checkpoints: Sequence[Checkpoint], first: int | None, where: str) -> list[VerifyProblem]:
    """A finding for each checkpoint that signed another first `seq` of chain rule 2 than `first`
    (the store's, or an export's header): an entry taken for rule 1 there has its erased hash taken
    as given, so moving that boundary would hide a rewritten history."""
    return [
        VerifyProblem(
            '',
            0,
            f'{where} chains by rule 2 from entry #{first}, but {c.label} signed #{c.body.chain_from}: '
            'the boundary was moved, which would let rewritten entries pass (docs/audit.md)',
            code='checkpoint-mismatch',
        )
        for c in checkpoints
        if c.body.chain_from is not None and c.body.chain_from != first
    ]


def compare_store(txn: ReadTxn, checkpoints: Sequence[Checkpoint]) -> list[VerifyProblem]:
    """The findings of comparing the store's entries with `checkpoints` (see `Comparison`)."""
    check_not_ahead(checkpoints, assigned_last_seq(txn))
    try:
        first = chain_from(txn)
    except CorruptStoreError:
        first = None  # verify names the malformed record
    moved = compare_chain_from(checkpoints, first, 'the store')
    comparison = Comparison(checkpoints)
    for key, value in txn.scan(Table.ENTRIES):
        header = _header(key_seq(key), value) if len(key) == 8 else None
        if header is None:
            continue  # verify names it; its seq then counts as missing here
        comparison.observe(header.seq, header.conversation_id, header.kind, bytes(value[-HASH_SIZE:]))
    return moved + comparison.finish()


# --- signed exports ---------------------------------------------------------------------------


class SignedExport(msgspec.Struct, frozen=True, kw_only=True, tag_field='type', tag='signed'):
    """The last line of a signed export, after its checkpoint lines."""

    keys: list[str]
    """The fingerprints of the keys that signed its checkpoints, in the order first used."""
    checkpoints: int
    """How many checkpoint lines precede it."""
    complete: bool
    """Whether the export holds every conversation (a partial one is checked only for those it holds)."""


_signed_decoder: Final = msgspec.json.Decoder(SignedExport)
TRAILER_TYPES: Final = (b'{"type":"checkpoint"', b'{"type":"signed"')
"""How the lines a signed export adds after its closing line begin."""


def signed_trailer(txn: ReadTxn, *, complete: bool) -> list[bytes]:
    """The lines a signed export adds after its closing line: every recorded checkpoint, then
    a `SignedExport` line."""
    recorded = recorded_checkpoints(txn)
    if not recorded:
        raise CheckpointError(
            'the store holds no checkpoint to sign the export with; make one first '
            '(`eventlog checkpoint --key KEY -o FILE`) or give a key to the export'
        )
    keys = list(dict.fromkeys(c.key_fingerprint for c in recorded))
    closing = SignedExport(keys=keys, checkpoints=len(recorded), complete=complete)
    return [*(c.to_bytes() for c in recorded), _encoder.encode(closing) + b'\n']


def _require_file(path: Path, what: str) -> None:
    """Refuse a directory, a device or a pipe where `what` (a regular file) is read: reading
    `/dev/zero` line by line would never end."""
    if path.exists() and not path.is_file():
        raise CheckpointFormatError(f'{path} is not {what}: it is not a regular file')


def _export_trailer(path: Path) -> tuple[list[Checkpoint], SignedExport]:
    """The checkpoints and closing `SignedExport` line of a signed export file."""
    found: list[Checkpoint] = []
    signed: SignedExport | None = None
    with path.open('rb') as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.startswith(TRAILER_TYPES[0]):
                found.append(Checkpoint.from_bytes(raw, source=f'the checkpoint on line {number} of {path}'))
            elif raw.startswith(TRAILER_TYPES[1]):
                try:
                    signed = _signed_decoder.decode(raw)
                except msgspec.DecodeError as exc:
                    raise CheckpointFormatError(
                        f'line {number} of {path} is not a valid signature line ({_first_line(exc)})'
                    ) from None
    if signed is None and found:
        raise CheckpointFormatError(
            f'{path} was cut short: its {len(found)} checkpoint line(s) are not followed by the closing '
            'signature line of a signed export'
        )
    if signed is None or not found:
        raise CheckpointFormatError(f'{path} is not a signed export: it holds no checkpoints (export it with --signed)')
    if signed.checkpoints != len(found):
        raise CheckpointFormatError(
            f'{path} says it holds {signed.checkpoints} checkpoints but {len(found)} were found: it was edited'
        )
    return found, signed


def verify_export(source: str | os.PathLike[str], public_key: PublicKeySource) -> VerifyReport:
    """Check a signed export without its store: its chains and closing line (as an import does)
    and every entry against the checkpoints it carries that `public_key` signed.

    Checkpoints of other keys are left out (`CheckpointSignatureError` when none is this key's);
    a checkpoint of this key with a bad signature raises `CheckpointSignatureError`. A partial
    export (`complete` false) is checked only for the conversations it holds.
    """
    from eventlog._transfer import Header, read_export

    path = Path(source)
    key = as_public_key(public_key)
    try:
        _require_file(path, 'a signed export')
        found, signed = _export_trailer(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise CheckpointFormatError(f'cannot read the export {path}: {getattr(exc, "strerror", None) or exc}') from None
    mine = [c for c in found if c.key_fingerprint == key.fingerprint]
    if not mine:
        raise CheckpointSignatureError(
            f'no checkpoint of {path} was signed by {key.fingerprint}; its checkpoints are signed by '
            + ', '.join(signed.keys)
        )
    verify_signatures(mine, key)
    comparison = Comparison(mine)
    count = 0
    last = 0
    header: list[Header] = []
    with path.open('rb') as fh:
        for _, line in read_export(fh, trailer=[], header_out=header):
            count += 1
            last = line.seq
            comparison.observe(line.seq, line.conversation_id, line.kind, bytes.fromhex(line.hash))
    if signed.complete:
        check_not_ahead(mine, last)
    moved = compare_chain_from(mine, header[0].chain_from if header else None, 'the export')
    problems = moved + comparison.finish(None if signed.complete else comparison.conversations)
    return VerifyReport(
        ok=not problems,
        entries_checked=count,
        conversations_checked=len(comparison.conversations),
        problems=problems,
    )
