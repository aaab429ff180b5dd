"""`ids_with_prefix` and `unique_prefix_lengths`: run and conversation ids by prefix, on every backend."""

from __future__ import annotations

import pytest

from eventlog import InvalidArgumentError, run_finished_entry, run_started_entry
from eventlog.log import EventLogBase

RUNS = {
    'conv-a': ['01a2300c-33c9-7117-b962-157c08bdd257', '01a2300c-33c9-7118-aaaa-000000000000'],
    'conv-ab': ['01a2300c-34c6-724e-bdcd-819b00e30b24', 'r1'],
    'other': ['r10', 'r2', 'zz'],
}


async def _store(log: EventLogBase) -> None:
    for conversation_id, run_ids in RUNS.items():
        for run_id in run_ids:
            await log.append(run_started_entry(conversation_id=conversation_id, run_id=run_id))
            await log.append(run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'))


async def test_ids_with_prefix_is_the_range_of_ids_starting_with_it(log: EventLogBase) -> None:
    await _store(log)
    assert await log.ids_with_prefix('run', '01a2300c-33c9') == [
        '01a2300c-33c9-7117-b962-157c08bdd257',
        '01a2300c-33c9-7118-aaaa-000000000000',
    ]
    assert await log.ids_with_prefix('run', '01a2300c') == [
        '01a2300c-33c9-7117-b962-157c08bdd257',
        '01a2300c-33c9-7118-aaaa-000000000000',
        '01a2300c-34c6-724e-bdcd-819b00e30b24',
    ]
    assert await log.ids_with_prefix('run', 'r1') == ['r1', 'r10']  # the exact id is among them
    assert await log.ids_with_prefix('run', 'r', limit=2) == ['r1', 'r10']
    assert await log.ids_with_prefix('run', 'q') == []
    assert await log.ids_with_prefix('run', 'zz') == ['zz']
    assert await log.ids_with_prefix('run', 'zzz') == []
    # Conversations are their own namespace.
    assert await log.ids_with_prefix('conversation', 'conv') == ['conv-a', 'conv-ab']
    assert await log.ids_with_prefix('conversation', 'r') == []
    assert await log.ids_with_prefix('conversation', 'conv-ab') == ['conv-ab']


async def test_archived_conversations_are_found_and_deleted_ones_are_not(log: EventLogBase) -> None:
    await _store(log)
    await log.archive('conv-a')
    assert await log.ids_with_prefix('conversation', 'conv') == ['conv-a', 'conv-ab']
    await log.delete_conversation('conv-a')
    assert await log.ids_with_prefix('conversation', 'conv') == ['conv-ab']
    assert await log.unique_prefix_lengths('conversation', ['conv-ab']) == {'conv-ab': 1}
    # Its runs went with it.
    assert await log.ids_with_prefix('run', '01a2300c-33') == []
    assert await log.unique_prefix_lengths('run', ['01a2300c-34c6-724e-bdcd-819b00e30b24']) == {
        '01a2300c-34c6-724e-bdcd-819b00e30b24': 1
    }


async def test_unique_prefix_lengths_are_what_tells_each_id_from_its_neighbours(log: EventLogBase) -> None:
    await _store(log)
    lengths = await log.unique_prefix_lengths(
        'run',
        [
            '01a2300c-33c9-7117-b962-157c08bdd257',
            '01a2300c-33c9-7118-aaaa-000000000000',
            '01a2300c-34c6-724e-bdcd-819b00e30b24',
            'r1',
            'r10',
            'r2',
            'zz',
        ],
    )
    assert lengths == {
        '01a2300c-33c9-7117-b962-157c08bdd257': 18,  # shares '01a2300c-33c9-711' with its neighbour
        '01a2300c-33c9-7118-aaaa-000000000000': 18,
        '01a2300c-34c6-724e-bdcd-819b00e30b24': 11,
        'r1': 2,  # r10 starts with all of it: only the exact id names it
        'r10': 3,
        'r2': 2,
        'zz': 1,
    }
    # A prefix of that length names its id alone (but for ids starting with all of it); one
    # character less names another id too.
    for identifier, length in lengths.items():
        found = await log.ids_with_prefix('run', identifier[:length])
        assert identifier in found and all(other.startswith(identifier) for other in found)
        if length > 1:
            assert len(await log.ids_with_prefix('run', identifier[: length - 1])) > 1
    # An id that is not stored gets the length that tells it from every stored one.
    assert await log.unique_prefix_lengths('run', ['r3', '01a2300c-35']) == {'r3': 2, '01a2300c-35': 11}
    assert await log.unique_prefix_lengths('conversation', ['conv-a', 'conv-ab', 'other']) == {
        'conv-a': 6,
        'conv-ab': 7,
        'other': 1,
    }
    assert await log.unique_prefix_lengths('run', []) == {}


async def test_prefix_lookups_refuse_what_is_not_an_id(log: EventLogBase) -> None:
    await _store(log)
    with pytest.raises(InvalidArgumentError):
        await log.ids_with_prefix('run', '')
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.ids_with_prefix('run', 'a\x1b')
    with pytest.raises(InvalidArgumentError):
        await log.ids_with_prefix('entry', 'r')  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidArgumentError):
        await log.ids_with_prefix('run', 'r', limit=-1)
    with pytest.raises(InvalidArgumentError):
        await log.unique_prefix_lengths('run', [''])
