"""Search QA: answer questions by searching a local corpus (BM25, or a dense e5 + FAISS index).

The paper's harness-dominated domain: query rewriting, how many documents come back,
how each is cut and how the context is managed decide most of the accuracy. The
toolbox offers one `search` tool; the verifier is normalised exact match (token F1
alongside); the behaviour flags are format compliance, retrieval hit, correct given a
hit and searches made. The default source is a generated fictional world sized for
SmolLM2-135M on a CPU; HotpotQA, NQ-open and generic QA/corpus jsonl files load too.

    domain = get_domain("searchqa")
    splits = domain.load_splits(n_train=64, n_search=32, n_test=64, seed=0)

Calibration (bench/calibrate_searchqa.py, SmolLM2-135M, 64 test questions x 8 samples,
temperature 1, vLLM on 2 CPU cores): h0 mean@8 0.000 (format_valid 0.057, searches 0.084,
retrieval_hit 0.002), h1 mean@8 0.084 (retrieval_hit 0.766, correct_given_hit 0.110,
founded_year 0.341). h0 is still at zero: the default preset does not yet meet the
"h0 above 0" target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain, Splits, Toolbox, Verdict
from whalekit.domains.searchqa.data import Document, load_corpus_jsonl, load_hotpotqa
from whalekit.domains.searchqa.dense import DenseIndex
from whalekit.domains.searchqa.retrieval import BM25Index, Hit, Retriever, cut_to_tokens, render_hits
from whalekit.domains.searchqa.splits import (
    file_splits,
    file_splits_with_test_sets,
    generated_splits,
    load_qa_files,
    load_test_sets,
)
from whalekit.domains.searchqa.verifier import (
    FAILURE_MODES,
    behaviour_flags,
    exact_match,
    failure_mode,
    search_results,
    token_f1,
)
from whalekit.domains.searchqa.world import FAMILIES, ONE_HOP, TWO_HOP, World, generate_world
from whalekit.types import Task, TaskView, ToolResult, Trajectory

__all__ = ["SearchQADomain", "FAMILIES", "ONE_HOP", "TWO_HOP", "DEFAULT_MIX"]

# Calibrated for SmolLM2-135M (bench/calibrate_searchqa.py): mostly one-hop questions and
# comparisons (`born_first`: one of the two names asked about, as in HotpotQA's comparison
# questions), so h0 scores above zero, with every two-hop family present for the harness to learn.
DEFAULT_MIX: dict[str, float] = {"birthplace": 2, "occupation": 2, "founded_year": 2, "born_first": 2,
                                 "birth_country": 1, "founder_birthplace": 1, "org_country": 1}
MAX_K = 20  # most documents one search may return
BM25_RANKING = "by BM25"  # how the search tool ranks documents, as its description says


def describe_tools(ranking: str = BM25_RANKING) -> str:
    """What a proposer is told about the toolbox, `ranking` naming the retriever in use. The
    BM25 text is byte-identical to the one the committed records' prompts were made with."""
    return (
        f"search(query: str, k: int = 5) -> the k best documents for `query` {ranking} over the task's corpus "
        f"(k is clamped to 1..{MAX_K}; optional max_doc_tokens cuts each document's text after that many tokens, "
        "a word or a punctuation mark counting as one). ToolResult.output is the documents, one block each: "
        "'[rank] Title (id: ID, score: S)' then the text, blank-line separated. ToolResult.meta holds "
        "'query', 'k', 'doc_ids', 'scores' and 'documents' (a list of {'id', 'title', 'text', 'score'}), so a "
        "harness can re-rank, truncate or reformat them in format_tool_result. Call it as "
        "ToolCall('search', {'query': '...', 'k': 3}). Questions are in task.inputs['question']."
    )


def dense_ranking(index: DenseIndex) -> str:
    """The dense retriever's ranking, named by its encoder's folder (e5-base-v2 in the paper)."""
    return f"by cosine similarity of {Path(str(index.encoder_path)).name} embeddings (dense retrieval)"


class SearchQADomain(Domain):
    name = "searchqa"
    tools_description = describe_tools()  # BM25's; use_dense_index replaces it for this domain
    failure_modes = FAILURE_MODES

    def __init__(self, n_people: int = 200, n_orgs: int = 100, n_cities: int = 40, n_countries: int = 8,
                 world_seed: int = 0, mix: dict[str, float] | None = None, default_k: int = 5):
        self.world_sizes = dict(n_people=n_people, n_orgs=n_orgs, n_cities=n_cities, n_countries=n_countries,
                                seed=world_seed)
        self.mix = dict(DEFAULT_MIX if mix is None else mix)
        self.default_k = default_k
        self._world: World | None = None
        self._index: BM25Index | DenseIndex | None = None

    # --- data ---------------------------------------------------------------------
    @property
    def world(self) -> World:
        if self._world is None:
            self._world = generate_world(**self.world_sizes)
        return self._world

    def load_splits(self, n_train: int = 64, n_search: int = 32, n_test: int = 64, seed: int = 0,
                    source: str = "generated", path: str | Path | list[str | Path] | None = None,
                    corpus: str | Path | None = None, test_paths: list[str | Path] | None = None,
                    dense_index: str | Path | None = None, **options: Any) -> Splits:
        """source: "generated" (the world), "hotpotqa" (path: distractor-setting file; its
        paragraphs are the corpus, plus `corpus` if given), or "jsonl"/"nq_open" (path: QA
        jsonl, or a list of them pooled; corpus: corpus jsonl). The loaded corpus becomes the
        search tool's index. test_paths: QA jsonl test files, each its own sub-dataset named by
        the file (up to n_test questions from each); `path` then gives training and search only.
        dense_index: a folder built by `whalekit.domains.searchqa.dense` (e5 + FAISS, the authors'
        retriever) searched instead of BM25; its corpus is the one it was built from (`corpus`,
        if given, must be that file), opened from disk and never loaded whole ("jsonl"/"nq_open")."""
        if options:
            raise TypeError(f"unknown load_splits options: {', '.join(sorted(options))}")
        sizes = (n_train, n_search, n_test)
        if source == "generated":
            index = self.set_corpus(self.world.documents)
            parts = generated_splits(self.world, sizes, self.mix, seed, corpus=index.fingerprint)
            return Splits(*parts)
        if path is None:
            raise ValueError(f"source={source!r} needs path=... (the questions file)")
        if source == "hotpotqa":
            if not isinstance(path, (str, Path)):
                raise ValueError("source='hotpotqa' reads one file; pool several with source='jsonl'")
            documents, examples = load_hotpotqa(path)
            if corpus is not None:
                known = {d.id for d in documents}
                documents += [d for d in load_corpus_jsonl(corpus) if d.id not in known]
        elif source in ("jsonl", "nq_open") and dense_index is not None:
            examples = load_qa_files(path, subset="nq_open" if source == "nq_open" else None)
            dense = self.use_dense_index(dense_index)
            if corpus is not None and Path(corpus).resolve() != dense.corpus.resolve():
                raise ValueError(f"dense_index {dense_index} was built from {dense.corpus}, not corpus={corpus}")
            return self._file_splits(examples, test_paths, sizes, seed, path, dense.fingerprint)
        elif source in ("jsonl", "nq_open"):
            if corpus is None:
                raise ValueError(f"source={source!r} needs corpus=... (a corpus jsonl: id, title, text)")
            examples = load_qa_files(path, subset="nq_open" if source == "nq_open" else None)
            documents = load_corpus_jsonl(corpus)
        else:
            raise ValueError(f"unknown source {source!r}; use 'generated', 'hotpotqa', 'nq_open' or 'jsonl'")
        if dense_index is not None:
            raise ValueError(f"dense_index needs source 'jsonl' or 'nq_open' (a corpus file), not {source!r}")
        index = self.set_corpus(documents)
        return self._file_splits(examples, test_paths, sizes, seed, path, index.fingerprint)

    @staticmethod
    def _file_splits(examples: Any, test_paths: list[str | Path] | None, sizes: tuple[int, int, int], seed: int,
                     path: Any, fingerprint: str) -> Splits:
        if test_paths:
            return Splits(*file_splits_with_test_sets(examples, load_test_sets(test_paths), sizes, seed, str(path),
                                                      corpus=fingerprint))
        return Splits(*file_splits(examples, sizes, seed, str(path), corpus=fingerprint))

    def set_corpus(self, documents: list[Document]) -> BM25Index:
        """Make `documents` the searched corpus (index loaded from the disk cache or built)."""
        if not isinstance(self._index, BM25Index) or self._index.documents != documents:
            self._index = BM25Index.load_or_build(documents)
        self.tools_description = describe_tools(BM25_RANKING)
        return self._index

    def use_dense_index(self, folder: str | Path) -> DenseIndex:
        """Search the dense index built in `folder` (opened from disk; pickled as its path)."""
        if not isinstance(self._index, DenseIndex) or self._index.folder != Path(folder):
            self._index = DenseIndex.open(folder)
        self.tools_description = describe_tools(dense_ranking(self._index))
        return self._index

    @property
    def index(self) -> Retriever:
        if self._index is None:  # a fresh domain (e.g. in a worker) searches the generated world
            self.set_corpus(self.world.documents)
        assert self._index is not None
        return self._index

    # --- tools --------------------------------------------------------------------
    def toolbox(self) -> Toolbox:
        default_k = self.default_k

        def search(task: TaskView, args: dict[str, Any]) -> ToolResult:
            query = args.get("query", "")
            if not isinstance(query, str) or not query.strip():
                return ToolResult("search", "The search query is empty.", ok=False, error="bad_arguments",
                                  meta={"query": str(query), "k": 0, "doc_ids": [], "scores": [], "documents": []})
            try:
                k = max(1, min(MAX_K, int(args.get("k", default_k))))
            except (TypeError, ValueError):
                k = default_k
            cut = args.get("max_doc_tokens")
            try:
                cut = None if cut is None else max(1, int(cut))
            except (TypeError, ValueError):
                cut = None
            hits = self.index.search(query, k)  # the corpus loaded last, even for an older toolbox
            if cut is not None:
                hits = [Hit(Document(h.document.id, h.document.title, cut_to_tokens(h.document.text, cut)), h.score,
                            h.rank) for h in hits]
            documents = [{"id": h.document.id, "title": h.document.title, "text": h.document.text,
                          "score": round(h.score, 4)} for h in hits]
            meta = {"query": query, "k": k, "doc_ids": [d["id"] for d in documents],
                    "scores": [d["score"] for d in documents], "documents": documents}
            return ToolResult("search", render_hits(query, hits), meta=meta)

        return Toolbox({"search": search})

    # --- scoring ------------------------------------------------------------------
    def verify(self, task: Task, answer: str | None) -> Verdict:
        references = [str(r) for r in (task.reference if isinstance(task.reference, list) else [task.reference])]
        correct = exact_match(answer, references)
        return Verdict(correct, float(correct), {"format_valid": answer is not None, "exact_match": correct,
                                                 "f1": token_f1(answer, references)})

    def behaviour(self, trajectory: Trajectory, task: Task, verdict: Verdict) -> dict[str, Any]:
        flags = super().behaviour(trajectory, task, verdict)
        references = task.reference if isinstance(task.reference, list) else [task.reference]
        by_id = self.index.by_id
        retrieved = {i for s in search_results(trajectory) for i in s.get("doc_ids", [])}
        texts = {i: by_id[i].contents() for i in retrieved if i in by_id}
        flags.update(behaviour_flags(trajectory, [str(r) for r in references], texts, verdict.correct))
        flags["f1"] = verdict.details.get("f1", 0.0)
        return flags

    def failure_mode(self, trajectory: Trajectory) -> str | None:
        return failure_mode(trajectory)
