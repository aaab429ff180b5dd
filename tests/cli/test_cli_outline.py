"""`show`, `show --run`, `replay` and `context` show a run's instructions once (and where they
change), mark branches (regenerated, edited, left) and forks, and nest a sub-agent run under the
tool call it ran in, on a store recorded by real agent runs (tests/outlinestore.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import invoke
from outlinestore import AFTER_TOOL, HELPER_INSTRUCTIONS, INSTRUCTIONS, SYSTEM, OutlineStore, outline_store

from eventlog_cli._text import clean


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> OutlineStore:
    return outline_store(tmp_path_factory.mktemp('outline') / 'store.lmdb')


def _ok(*args: str | Path, store: Path) -> str:
    result = invoke(*args, store=store)
    assert result.exit_code == 0, result.output
    return result.stdout


_MARKS = ('↳', '↰', '⑂')


def _skeleton(out: str) -> list[str]:
    """The lines of a transcript that begin an entry or carry a mark, right-stripped."""
    return [
        line.rstrip()
        for line in out.splitlines()
        if line.startswith('#') or line.lstrip().startswith(_MARKS) or line.endswith(':')
    ]


def test_show_marks_branches_and_nests_the_sub_agent(store: OutlineStore) -> None:
    out = _ok('show', 'talk', store=store.path)
    runs = store.runs
    assert _skeleton(out) == [
        '#2      Instructions: Answer in one line.',
        '#3      Assistant: answer to how high do rockets fly',
        f'        ↰ branch left: run {runs["regenerated"]} went on from entry #3 instead (regenerated)',
        '#6      Instructions: (as at #2)',
        '#7      Assistant: answer to and how fast',
        f'        ↳ branch from entry #3: regenerated, run {runs["regenerated"]}; the branch from #6 on is left',
        f'        ↰ branch left: run {runs["edited"]} went on from entry #3 instead (edited)',
        '#10     Instructions: (as at #2)',
        '#11     Assistant: answer to and how fast',
        f'        ↳ branch from entry #3: edited, run {runs["edited"]}; the branch from #10 on is left',
        '#14     Instructions: (as at #2)',
        '#15     Assistant: answer to and how heavy',
        '#18     Instructions: (as at #2)',
        '#19     Tool Call [ask_helper]: {"question": "what fuel"}',
        f'        ↳ sub-agent run {runs["helper"]} (agent helper) inside tool call ask_helper (call call-h1)',
        f'#22     │ Instructions: {clean(HELPER_INSTRUCTIONS)}',
        '#23     │ Assistant: answer to what fuel',
        f'#26     Instructions (changed): {INSTRUCTIONS}',
        '#27     Assistant: the helper said: answer to what fuel',
    ]
    # The sub-agent's prompt is nested under the tool call, never a user turn of the conversation.
    lines = out.splitlines()
    assert '          User: what fuel' in lines
    assert not any(line.startswith('        User: what fuel') for line in lines)
    # The instructions come whole once, their change whole again (the tool result line added).
    assert out.count('Quote the tool result.') == 1 and AFTER_TOOL in out.split('#26', 1)[1]
    assert out.count('search_conversation_history') == 2  # ConversationSearch's own, at #2 and at #26
    # The system prompt and the instructions are stored text: escapes shown, markup printed as written.
    assert f'System: {clean(SYSTEM)}' in out and '[bold]carefully[/bold]' in out
    assert '\x1b' not in out and '\x07' not in out and '\\x1b]0;owned\\x07 <b>no markup</b>' in out


def test_show_of_a_fork_names_its_origin(store: OutlineStore) -> None:
    out = _ok('show', 'fork', store=store.path)
    assert _skeleton(out) == [
        f'⑂ forked from talk at entry #{store.fork_at}',
        '2 messages inherited from talk, by reference:',
        '#2      Instructions: Answer in one line.',
        '#3      Assistant: answer to how high do rockets fly',
        'then this conversation:',
        '#31     Instructions: (as at #2)',
        '#32     Assistant: answer to in the fork',
    ]


def test_show_run_of_a_branch_says_so(store: OutlineStore) -> None:
    out = _ok('show', '--run', store.runs['edited'], store=store.path)
    assert out.splitlines()[1] == (
        f'↳ branch from entry #3: edited, run {store.runs["edited"]}; the branch from #10 on is left'
    )
    assert '#14     Instructions: Answer in one line.' in out  # the first request of the run: whole
    plain = _ok('show', '--run', store.runs['first'], store=store.path)
    assert not any(mark in plain for mark in _MARKS)


def test_replay_shows_the_branch_the_sub_agent_and_the_instruction_change(store: OutlineStore) -> None:
    out = _ok('replay', store.runs['delegating'], store=store.path)
    lines = out.splitlines()
    started = next(i for i, line in enumerate(lines) if 'ask_helper started' in line)
    sub_agent = next(i for i, line in enumerate(lines) if 'sub-agent' in line)
    completed = next(i for i, line in enumerate(lines) if 'ask_helper completed' in line)
    assert started < sub_agent < completed
    assert f'↳ sub-agent run {store.runs["helper"]} (agent helper) inside tool call ask_helper' in lines[sub_agent]
    assert out.count('Instructions: Answer in one line.') == 1
    assert out.count(f'Instructions (changed): {INSTRUCTIONS}') == 1
    assert 'User: what fuel' not in out  # the sub-agent's messages are its own run's
    header = _ok('replay', store.runs['regenerated'], store=store.path)
    assert f'branch        ↳ branch from entry #3: regenerated, run {store.runs["regenerated"]}' in header


def test_replay_json_carries_the_branch(store: OutlineStore) -> None:
    data = json.loads(_ok('replay', store.runs['regenerated'], '--json', store=store.path))
    assert data['branch'] == {
        'kind': 'branch',
        'run_id': store.runs['regenerated'],
        'at': 3,
        'how': 'regenerated',
        'left': 6,
    }
    assert list(data) == ['run', 'branch', 'entries']
    assert json.loads(_ok('replay', store.runs['second'], '--json', store=store.path))['branch'] is None
    # The stored instructions themselves are in the entries, exactly as stored.
    request = data['entries'][1]
    assert request['kind'] == 'message' and request['payload']['instructions'].startswith(INSTRUCTIONS)


def test_context_shows_the_instructions_once(store: OutlineStore) -> None:
    out = _ok('context', 'fork', store=store.path)
    assert _skeleton(out) == [
        '#2      Instructions: Answer in one line.',
        '#3      Assistant: answer to how high do rockets fly',
        '#31     User: in the fork',
        '#32     Assistant: answer to in the fork',
    ]


def test_a_run_without_history_in_a_used_conversation_branches_from_the_start(tmp_path: Path) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from capability.persistence import EventLogPersistence
    from eventlog import LmdbEventLog

    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        agent = Agent(TestModel(custom_output_text='ok'), capabilities=[EventLogPersistence(log)])
        agent.run_sync('first', conversation_id='c3')
        again = agent.run_sync('second', conversation_id='c3')  # no message_history: a new line
    finally:
        log.close()
    assert _skeleton(_ok('show', 'c3', store=path)) == [
        f'        ↰ branch left: run {again.run_id} went on from the start instead (edited)',
        '#2      User: first',
        '#3      Assistant: ok',
        f'        ↳ branch from the start: edited, run {again.run_id}; the branch from #2 on is left',
        '#6      User: second',
        '#7      Assistant: ok',
    ]
