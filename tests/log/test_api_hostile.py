"""The sweep of the API: public entry points fed hostile paths and files raise an
`EventLogError` subclass (typed, one line), never a `ValueError`, `MemoryError` or the like."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eventlog import LmdbEventLog
from eventlog.checkpoint import Checkpoint, PublicKey, Signer, load_checkpoints, verify_export, write_key_pair
from eventlog.errors import EventLogError


@pytest.fixture
def hostile_files(tmp_path: Path) -> list[str]:
    """Paths no reader can use: a NUL, nothing, a directory, a device, garbage, a cut file, too long a name."""
    garbage = tmp_path / 'garbage'
    garbage.write_bytes(bytes(range(256)) * 10)
    garbage.chmod(0o600)
    empty = tmp_path / 'empty'
    empty.write_bytes(b'')
    return ['a\x00b', '', str(tmp_path), '/dev/zero', str(garbage), str(empty), 'x' * 5000, str(tmp_path / 'absent')]


def test_every_file_reader_raises_a_typed_error_for_every_hostile_path(
    hostile_files: list[str], tmp_path: Path
) -> None:
    _, public, _ = write_key_pair(tmp_path / 'k.key')
    readers: list[tuple[str, Callable[[str], object]]] = [
        ('Signer.from_file', Signer.from_file),
        ('PublicKey.from_file', PublicKey.from_file),
        ('Checkpoint.read', Checkpoint.read),
        ('load_checkpoints', lambda path: load_checkpoints([path])),
        ('verify_export', lambda path: verify_export(path, public)),
    ]
    runs = 0
    for name, read in readers:
        for path in hostile_files:
            with pytest.raises(EventLogError) as caught:
                read(path)
            assert '\n' not in str(caught.value), (name, path)
            runs += 1
    assert runs == len(readers) * len(hostile_files)


@pytest.mark.parametrize('path', ['a\x00b', '', '/dev/zero', 'x' * 5000])
def test_an_unusable_store_path_is_a_store_location_error(path: str, tmp_path: Path) -> None:
    with pytest.raises(EventLogError):
        LmdbEventLog(path)


def _nested_dict(depth: int) -> dict[str, object]:
    top: dict[str, object] = {'kind': 'tree'}
    inner = top
    for _ in range(depth):
        inner['a'] = inner = {}
    return top


async def test_deeply_nested_messages_are_stored_whole_or_refused_typed(tmp_path: Path) -> None:
    """Issue 42: tool arguments nesting 600 and 100,000 levels (JSON text, as a model sends them)
    and 150 (a dict) are stored and read back exactly, exported and imported byte for byte; a dict
    pydantic-ai would write but not read back (220 levels) is refused with a typed one-line error."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart

    from eventlog import InvalidPayloadError, message_entry, run_finished_entry, run_started_entry

    messages = [
        ModelRequest(parts=[UserPromptPart('go deep')]),
        ModelResponse(parts=[ToolCallPart('t', '{"a":' * 600 + '1' + '}' * 600, tool_call_id='c600')]),
        ModelResponse(parts=[ToolCallPart('t', '[' * 100_000 + ']' * 100_000, tool_call_id='c100000')]),
        ModelResponse(parts=[ToolCallPart('t', _nested_dict(150), tool_call_id='c150')]),
        ModelResponse(parts=[TextPart('back up')]),
    ]
    with pytest.raises(InvalidPayloadError) as caught:
        message_entry(ModelResponse(parts=[ToolCallPart('t', _nested_dict(220))]), conversation_id='c', run_id='r')
    assert '\n' not in str(caught.value) and 'deeper than pydantic-ai reads back' in str(caught.value)

    log = LmdbEventLog(tmp_path / 'store.lmdb')
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        for message in messages:
            await log.append(message_entry(message, conversation_id='c', run_id='r'))
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed'))
        payloads = await log.run_message_payloads('r')
        assert [p.args for m in await log.run_messages('r') for p in m.parts if isinstance(p, ToolCallPart)] == [
            p.args for m in messages for p in m.parts if isinstance(p, ToolCallPart)
        ]
        assert len(await log.context('c')) == len(messages)
        assert (await log.verify()).ok
        await log.export(tmp_path / 'c.jsonl')
    finally:
        log.close()
    copy = LmdbEventLog(tmp_path / 'copy.lmdb')
    try:
        await copy.import_(tmp_path / 'c.jsonl')
        assert await copy.run_message_payloads('r') == payloads
        assert (await copy.verify()).ok
    finally:
        copy.close()
