"""Helpers for the transfer tests: exports built by hand, with valid hashes, as an attacker would."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from eventlog import _engine as engine
from eventlog._transfer import Closing, ExportedEntry, Header

STAMP = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Crafted:
    """Entry lines of an export with correct chain hashes, and the export's framing."""

    lines: list[ExportedEntry] = field(default_factory=list)
    heads: dict[str, bytes] = field(default_factory=dict)

    def add(
        self,
        seq: int,
        conversation_id: str,
        kind: str,
        payload: bytes = b'',
        *,
        run_id: str | None = None,
        parent: int | None = None,
        detached: bool = False,
    ) -> None:
        """Append an entry line whose hash chains to the conversation's previous line."""
        draft = ExportedEntry(
            seq=seq,
            conversation_id=conversation_id,
            run_id=run_id,
            kind=kind,
            timestamp=STAMP,
            parent=parent,
            payload=msgspec.Raw(payload or b'null'),
            hash='',
            detached=detached,
        )
        prev = b'' if kind == 'deleted' else self.heads.get(conversation_id, b'')
        digest = engine.chain_hash(prev, engine.encode_body_of(draft, payload))
        self.heads[conversation_id] = digest
        self.lines.append(msgspec.structs.replace(draft, hash=digest.hex()))

    def header(self, version: int = 2) -> bytes:
        return msgspec.json.encode(Header('pydantic-ai-eventlog', version)) + b'\n'

    def body(self) -> bytes:
        return b''.join(msgspec.json.encode(line) + b'\n' for line in self.lines)

    def closing(self) -> bytes:
        heads = {conv: digest.hex() for conv, digest in self.heads.items()}
        return msgspec.json.encode(Closing(entries=len(self.lines), heads=heads)) + b'\n'

    def export(self) -> bytes:
        """The whole export: header, entry lines, closing line."""
        return self.header() + self.body() + self.closing()
