"""BM25 retrieval over a local corpus (bm25s), with the index cached on disk; the `Retriever`
interface it shares with dense retrieval (`dense.py`: e5 + FAISS, the authors' retriever).

The index is built once per corpus and stored under
`whalekit.samplers.model_files.cache_dir() / "bm25" / <corpus fingerprint>`, so every later process
(rollout workers, notebooks) loads it in milliseconds instead of re-tokenising. The
search returns top-k documents with scores and ids and nothing more: how many to show,
how to cut them and how to rewrite the query are the harness's decisions.

    index = BM25Index.load_or_build(documents)
    hits = index.search("where was Zorvan Kell born", k=5)   # [Hit(doc, score, rank), ...]
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from whalekit.domains.searchqa.data import Document, corpus_fingerprint
from whalekit.samplers.model_files import cache_dir

_TOKEN = re.compile(r"\w+|[^\w\s]")  # what cut_to_tokens counts as one token
INDEX_VERSION = 1  # bump when tokenisation or BM25 parameters change: old caches are ignored
STOPWORDS = "en"


@dataclass(frozen=True)
class Hit:
    document: Document
    score: float
    rank: int  # 1-based


class Retriever(Protocol):
    """What the search tool and the behaviour flags need of a retriever: `BM25Index` (the
    default, built from the loaded corpus) or `dense.DenseIndex` (e5 + FAISS, opened from disk)."""

    @property
    def fingerprint(self) -> str: ...  # the corpus's content hash: splits and caches are keyed by it

    @property
    def by_id(self) -> Mapping[str, Document]: ...

    def search(self, query: str, k: int = 5) -> list[Hit]: ...


def index_cache_root() -> Path:
    return cache_dir() / "bm25"


class BM25Index:
    """A bm25s index plus the documents it ranks. Thread-safe searching (the engine runs
    tool calls from many episodes concurrently)."""

    def __init__(self, documents: list[Document], retriever: Any, fingerprint: str):
        self.documents = documents
        self.retriever = retriever
        self.fingerprint = fingerprint
        self.by_id = {doc.id: doc for doc in documents}
        self._lock = threading.Lock()

    @classmethod
    def build(cls, documents: list[Document]) -> BM25Index:
        import bm25s

        if not documents:
            raise ValueError("cannot index an empty corpus")
        tokens = bm25s.tokenize([d.contents() for d in documents], stopwords=STOPWORDS, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(documents, retriever, corpus_fingerprint(documents))

    @classmethod
    def load_or_build(cls, documents: list[Document], cache_root: Path | None = None) -> BM25Index:
        """Load the cached index for exactly these documents, or build and cache it."""
        import bm25s

        fingerprint = corpus_fingerprint(documents)
        root = cache_root or index_cache_root()
        target = root / f"v{INDEX_VERSION}-{fingerprint}"
        if (target / "params.index.json").exists():
            retriever = bm25s.BM25.load(str(target), show_progress=False)
            return cls(documents, retriever, fingerprint)
        index = cls.build(documents)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=root))
        try:
            index.retriever.save(str(tmp), show_progress=False)
            try:
                os.rename(tmp, target)  # atomic: a half-written index is never loaded
            except OSError:
                if not (target / "params.index.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return index

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Top-k documents by BM25 score; documents sharing no term with the query are
        left out, so an empty list means "nothing matched"."""
        import bm25s

        if k <= 0 or not query.strip():
            return []
        tokens = bm25s.tokenize([query], stopwords=STOPWORDS, return_ids=False, show_progress=False)
        if not tokens or not tokens[0]:
            return []
        k = min(k, len(self.documents))
        with self._lock:
            indices, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=0)
        hits: list[Hit] = []
        for index, score in zip(indices[0].tolist(), scores[0].tolist()):
            if score > 0:
                hits.append(Hit(self.documents[index], float(score), len(hits) + 1))
        return hits


def cut_to_tokens(text: str, max_tokens: int | None) -> str:
    """`text` cut after its first `max_tokens` tokens, counting a word or a punctuation
    mark as one token (a tokenizer-free stand-in for the authors' retriever, which cuts
    with the policy's tokenizer); None leaves it whole."""
    if max_tokens is None:
        return text
    ends = [m.end() for m in _TOKEN.finditer(text)]
    return text if len(ends) <= max_tokens else text[:ends[max_tokens - 1]] if max_tokens > 0 else ""


def render_hits(query: str, hits: list[Hit]) -> str:
    """The tool's default text: numbered documents with title, id and score, untruncated."""
    if not hits:
        return f"No documents matched the query {query!r}."
    blocks = [f"[{h.rank}] {h.document.title} (id: {h.document.id}, score: {h.score:.2f})\n{h.document.text}"
              for h in hits]
    return "\n\n".join(blocks)
