"""`AutoRecall`'s mode: left unset, `'hybrid'` with an embedder (it recalled most on real
conversations, LoCoMo's development half, docs/semantic.md) and `'bm25'` without one; a real agent's recall entry says which."""

from __future__ import annotations

import msgspec
import pytest
from pydantic_ai import Agent
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import AutoRecall, EventLogPersistence
from eventlog import InMemoryEventLog, InvalidArgumentError, RecallInfo
from tests.search.semtools import HashingEmbeddingModel


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart('ok')])


async def recorded_modes(recall: AutoRecall[None], log: InMemoryEventLog) -> list[str]:
    agent = Agent(FunctionModel(answer), capabilities=[recall, EventLogPersistence(log)])
    await agent.run('My locker code is 4417, remember it', conversation_id='c')
    result = await agent.run('what was the locker code again?', conversation_id='c')
    entries = await log.entries(run_id=result.run_id, kinds=['recall'])
    return [msgspec.json.decode(entry.payload, type=RecallInfo).mode for entry in entries]


async def test_an_unset_mode_is_hybrid_with_an_embedder() -> None:
    log = InMemoryEventLog()
    embedder = Embedder(HashingEmbeddingModel())
    recall: AutoRecall[None] = AutoRecall(log, embedder=embedder)
    assert recall.mode is None and recall.recall_mode == 'hybrid'
    assert recall.search_options(3).mode == 'hybrid' and recall.search_options(3).fusion == 'zscore'
    assert await recorded_modes(recall, log) == ['hybrid']


async def test_an_unset_mode_is_bm25_without_an_embedder_and_a_set_mode_is_kept() -> None:
    log = InMemoryEventLog()
    assert await recorded_modes(AutoRecall(log), log) == ['bm25']
    embedder = Embedder(HashingEmbeddingModel())
    assert AutoRecall(log, mode='bm25', embedder=embedder).recall_mode == 'bm25'
    assert AutoRecall(log, mode='semantic', embedder=embedder).search_options(3).mode == 'semantic'
    with pytest.raises(InvalidArgumentError, match='needs embedder'):
        AutoRecall(log, mode='hybrid')
