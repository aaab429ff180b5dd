"""`SearchEngine.find`: the structured result both the model's text and the command line render."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from searchtools import ListSource, exchange

from capability.persistence import EventLogPersistence
from capability.search import backend_for
from eventlog import ReplayHistorySource
from eventlog.log import EventLogBase
from search import DefaultAnalyzer, SearchEngine, SearchOptions, answer_text
from search.render import index_text


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f'noted {len(messages)}')])


async def _threaded_store(log: EventLogBase) -> list[str]:
    """Three runs of one conversation, each continuing the last with `message_history`."""
    agent = Agent(FunctionModel(_echo), capabilities=[EventLogPersistence(log)])
    history: list[ModelMessage] | None = None
    runs: list[str] = []
    for prompt in ['the walrus sleeps at noon', 'unrelated weather chat', 'the walrus eats at dusk']:
        result = await agent.run(prompt, message_history=history, conversation_id=None if history else 'c')
        history = result.all_messages()
        runs.append(result.run_id)
    return runs


async def test_hits_carry_the_entry_numbers_of_their_messages(log: EventLogBase) -> None:
    runs = await _threaded_store(log)
    engine = SearchEngine(backend_for(log, DefaultAnalyzer()), SearchOptions(context_lines=1))
    result = await engine.find('walrus', scope='conversation', conversation_id='c')
    assert result.outcome == 'found' and result.documents == 6 and result.matches == 2
    assert [hit.rank for hit in result.hits] == [1, 2]
    assert {hit.run_id for hit in result.hits} == {runs[0], runs[2]}
    for hit in result.hits:
        assert [m.position for m in hit.window] == list(range(hit.window[0].position, hit.window[-1].position + 1))
        matched = [m for m in hit.window if m.position == hit.position]
        assert len(matched) == 1 and hit.seq == matched[0].seq is not None
        for shown in hit.window:
            assert shown.seq is not None
            entry = await log.get_entry(shown.seq)
            assert entry is not None and entry.kind == 'message' and entry.conversation_id == 'c'
            assert index_text(entry.message()) == index_text(shown.message)  # the entry that stored it
    assert 'walrus' in index_text(
        next(m for m in result.hits[0].window if m.position == result.hits[0].position).message
    )
    assert result.timings.total >= result.timings.rank >= 0


async def test_a_run_id_search_numbers_inherited_messages_by_the_entries_that_first_stored_them(
    log: EventLogBase,
) -> None:
    runs = await _threaded_store(log)
    engine = SearchEngine(backend_for(log, DefaultAnalyzer()), SearchOptions(context_lines=0))
    result = await engine.find('walrus', scope='conversation', conversation_id='c', run_id=runs[2])
    assert result.outcome == 'found' and result.documents == 6  # a run's whole record is its corpus
    first = await engine.find('walrus', scope='conversation', conversation_id='c', run_id=runs[0])
    inherited = next(hit for hit in result.hits if hit.position == 0)
    assert inherited.seq == first.hits[0].seq  # the first run's entry, not a copy
    record = await log.get_run(runs[2])
    assert record is not None
    own = next(hit for hit in result.hits if hit.position == 4)
    assert own.seq is not None and own.seq > record.start_seq


async def test_the_model_text_is_rendered_from_the_result(log: EventLogBase) -> None:
    await _threaded_store(log)
    for style in ('reference', 'explained'):
        options = SearchOptions(answer_style=style)
        engine = SearchEngine(ReplayHistorySource(log), options)
        for query in ['walrus', 'absent', '', '?!']:
            result = await engine.find(query, scope='conversation', conversation_id='c', entry_numbers=False)
            text = await engine.search(query, scope='conversation', conversation_id='c')
            assert text == answer_text(result, options)
            assert all(m.seq is None for hit in result.hits for m in hit.window)  # not asked for


async def test_outcomes_and_repeated_window_messages() -> None:
    source = ListSource()
    source.add('r', 'c', exchange('walrus one', 'walrus two', 'other', 'more'))
    engine = SearchEngine(source, SearchOptions(context_lines=1))
    found = await engine.find('walrus', scope='conversation', conversation_id='c')
    assert found.outcome == 'found' and found.matches == 2 and len(found.hits) == 1  # the second is in the window
    assert [m.seq for m in found.hits[0].window] == [None, None]  # a source without entry numbers
    assert not any(m.repeated for m in found.hits[0].window)
    wide = await SearchEngine(source, SearchOptions(context_lines=0)).find(
        'walrus', scope='conversation', conversation_id='c'
    )
    assert len(wide.hits) == 2
    overlap = await SearchEngine(source, SearchOptions(context_lines=2)).find(
        'walrus more', scope='conversation', conversation_id='c'
    )
    assert [[(m.position, m.repeated) for m in hit.window] for hit in overlap.hits] == [
        [(1, False), (2, False), (3, False)],
        [(0, False), (1, True), (2, True)],  # shown by the first hit already
    ]
    cases = {
        ('walrus', None, 'conversation', None): 'no_conversation',
        ('absent', 'c', 'conversation', None): 'no_match',
        ('?!', 'c', 'conversation', None): 'no_terms',
        ('walrus', 'c', 'conversation', 'nope'): 'unknown_run',
        ('walrus', 'other', 'conversation', None): 'nothing_stored',
    }
    for (query, conversation, scope, run_id), outcome in cases.items():
        result = await engine.find(query, scope=scope, conversation_id=conversation, run_id=run_id)  # pyright: ignore[reportArgumentType]
        assert result.outcome == outcome, (query, conversation, run_id)
        assert result.hits == ()
