"""`EventLogPersistence(checkpoint_every=N, signer=...)`: real agent runs sign checkpoints routinely."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import chat_model
from pydantic_ai import Agent

from capability.persistence import EventLogPersistence, EventLogPersistenceError, EventLogPersistenceWarning
from eventlog import InvalidArgumentError
from eventlog.checkpoint import Checkpoint, Signer, write_key_pair
from eventlog.errors import KeyFileError
from eventlog.log import EventLogBase

SIGNER = Signer.generate()


async def test_every_third_run_signs_a_checkpoint(log: EventLogBase, tmp_path: Path) -> None:
    outside = tmp_path / 'checkpoints'
    outside.mkdir()
    persistence = EventLogPersistence[None](log, checkpoint_every=3, signer=SIGNER, checkpoint_dir=outside)
    agent = Agent(chat_model(), capabilities=[persistence], name='helper')
    for index in range(7):
        await agent.run(f'hello {index}', conversation_id=f'c{index % 2}')
    recorded = await log.checkpoints()
    assert len(recorded) == 2  # after runs 3 and 6
    files = sorted(outside.glob('checkpoint-*.json'))
    assert [Checkpoint.read(f) for f in files] == recorded
    assert recorded[1].body.since == recorded[0].last_seq
    last_of_sixth = recorded[1].last_seq
    assert last_of_sixth < await log.last_seq()  # the seventh run is after the last checkpoint
    report = await log.verify(checkpoints=files, public_key=SIGNER.public_key)
    assert report.ok, report.problems


async def test_a_key_file_is_read_once_when_the_capability_is_made(log: EventLogBase, tmp_path: Path) -> None:
    private, public, _ = write_key_pair(tmp_path / 'k')
    persistence = EventLogPersistence[None](log, checkpoint_every=1, signer=private)
    assert isinstance(persistence.signer, Signer)
    agent = Agent(chat_model(), capabilities=[persistence])
    await agent.run('hi', conversation_id='c')
    [made] = await log.checkpoints()
    made.verify_signature(public)
    with pytest.raises(KeyFileError, match='is a public key'):
        EventLogPersistence[None](log, checkpoint_every=1, signer=public)


@pytest.mark.parametrize(
    ('kwargs', 'message'),
    [
        ({'checkpoint_every': 0, 'signer': SIGNER}, 'positive integer'),
        ({'checkpoint_every': 2}, 'needs a signer'),
        ({'signer': SIGNER}, 'only with checkpoint_every'),
    ],
)
def test_bad_checkpoint_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    from eventlog import InMemoryEventLog

    log = InMemoryEventLog()
    with pytest.raises(InvalidArgumentError, match=message):
        EventLogPersistence[None](log, **kwargs)  # pyright: ignore[reportArgumentType]
    log.close()


async def test_a_checkpoint_that_cannot_be_written_follows_on_error(log: EventLogBase, tmp_path: Path) -> None:
    missing = tmp_path / 'no-such-dir'
    raising = EventLogPersistence[None](log, checkpoint_every=1, signer=SIGNER, checkpoint_dir=missing)
    with pytest.raises(EventLogPersistenceError, match='checkpoint after 1 runs could not be made'):
        await Agent(chat_model(), capabilities=[raising]).run('hi', conversation_id='c')
    warning = EventLogPersistence[None](log, checkpoint_every=1, signer=SIGNER, checkpoint_dir=missing, on_error='warn')
    with pytest.warns(EventLogPersistenceWarning, match='could not be made'):
        result = await Agent(chat_model(), capabilities=[warning]).run('hi again', conversation_id='c')
    assert await log.run_messages(result.run_id)  # the run itself was recorded
