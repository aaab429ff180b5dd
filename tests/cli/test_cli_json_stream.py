"""`replay --json` is printed entry by entry, and reads exactly as the whole document printed at once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clitools import Store, invoke, shared

from eventlog_cli import _render as render

_ = shared


@pytest.mark.parametrize(
    'items',
    [[], [{'a': 1, 'text': 'two\nlines', 'nested': {'k': [1, None]}}], [{'x': 'é\u202e'}, 3, [], {}]],
)
def test_the_streamed_document_is_byte_for_byte_the_whole_one(
    items: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    head = {'run': {'run_id': 'r', 'metadata': {'k': 'v'}}}
    render.print_json({**head, 'entries': items})
    whole = capsys.readouterr().out
    writer = render.JsonListWriter(head, 'entries')
    for item in items:
        writer.add(item)
    writer.close()
    assert capsys.readouterr().out == whole
    assert json.loads(whole)['entries'] == items


def test_replay_json_lists_every_entry_of_the_run(shared: Store) -> None:
    run_id = shared.alpha_runs[1]
    out = invoke('replay', run_id, '--json', store=shared.path)
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document['run']['run_id'] == run_id
    seqs = [entry['seq'] for entry in document['entries']]
    assert seqs == sorted(seqs) and len(seqs) >= 4
    assert {entry['run_id'] for entry in document['entries']} == {run_id}
    assert document['entries'][0]['kind'] == 'run_started' and document['entries'][-1]['kind'] == 'run_finished'
