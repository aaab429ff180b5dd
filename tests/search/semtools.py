"""Embedding models for the semantic search tests: deterministic, no network."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.embeddings.settings import EmbeddingSettings

_WORD = re.compile(r'\w+')


class HashingEmbeddingModel(EmbeddingModel):
    """Bag of hashed words: texts sharing words get similar vectors (deterministic, like a tiny real model).

    `synonyms` maps a word to another before hashing, so a paraphrase can match without sharing a word.
    """

    def __init__(self, dimensions: int = 64, name: str = 'hashing', synonyms: dict[str, str] | None = None) -> None:
        self._dimensions = dimensions
        self._name = name
        self.synonyms = synonyms or {}
        self.calls: list[int] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        super().__init__()

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def system(self) -> str:
        return 'test'

    def vector(self, text: str) -> list[float]:
        out = [0.0] * self._dimensions
        for word in _WORD.findall(text.lower()):
            word = self.synonyms.get(word, word)
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            out[int.from_bytes(digest[:4], 'little') % self._dimensions] += 1.0 if digest[4] & 1 else -1.0
        return out

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        if input_type == 'document':
            self.calls.append(len(texts))
            self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
        return EmbeddingResult(
            embeddings=[self.vector(text) for text in texts],
            inputs=texts,
            input_type=input_type,
            model_name=self._name,
            provider_name='test',
        )
