"""Dense retrieval (`whalekit.domains.searchqa.dense`), the authors' retriever in small: a tiny
random transformers encoder used e5's way over a real-format corpus sample (HotpotQA dev
paragraphs from /work/shared/realdata written as wiki-18 rows, `{"id", "contents": "\\"Title\\"\\ntext"}`),
a FAISS flat index built once, reopened from disk and pickled as its path; the search QA
domain searches it instead of BM25. Skips, saying why, without faiss or the sample."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

pytest.importorskip("faiss", reason="dense retrieval needs faiss: pip install 'whalekit[dense]'")

from whalekit.domains.searchqa import SearchQADomain  # noqa: E402
from whalekit.domains.searchqa.data import corpus_fingerprint, load_corpus_jsonl  # noqa: E402
from whalekit.domains.searchqa.dense import DenseIndex, E5Encoder, build_dense_index, iter_corpus  # noqa: E402

HOTPOTQA = Path(os.environ.get("WHALEKIT_REALDATA", "/work/shared/realdata")) / "hotpotqa" / "dev.jsonl"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """(corpus jsonl, QA jsonl, encoder dir, built index dir) from the first 12 HotpotQA dev questions."""
    if not HOTPOTQA.exists():
        pytest.skip(f"the real-format sample is not here ({HOTPOTQA} missing)")
    import torch
    from transformers import BertConfig, BertModel

    from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir

    root = tmp_path_factory.mktemp("dense")
    rows = [json.loads(line) for line in HOTPOTQA.read_text().splitlines()[:12]]
    passages: dict[str, str] = {}
    for row in rows:
        for title, sentences in zip(row["context"]["title"], row["context"]["sentences"]):
            passages.setdefault(title, "".join(sentences).strip())
    corpus = root / "wiki-18-sample.jsonl"
    lines = [json.dumps({"id": str(i), "contents": f'"{title}"\n{text}'}) for i, (title, text) in
             enumerate(passages.items())]
    corpus.write_text("\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n")  # a blank line is skipped
    qa = root / "qa.jsonl"
    qa.write_text("".join(json.dumps({"id": r["id"], "question": r["question"], "golden_answers": [r["answer"]]}) + "\n"
                          for r in rows))
    tokenizer = load_tokenizer(resolve_model_dir("tiny-random"))
    torch.manual_seed(0)
    encoder = root / "tiny-encoder"
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    index = build_dense_index(corpus, encoder, root / "index", batch_size=16, max_length=64)
    return corpus, qa, encoder, index, rows


def test_the_corpus_streams_row_by_row_with_byte_offsets(sample):
    corpus = sample[0]
    documents = load_corpus_jsonl(corpus)
    streamed = list(iter_corpus(corpus))
    assert [d for _, d in streamed] == documents and len(documents) > 100
    data = corpus.read_bytes()
    for offset, document in streamed[:8]:
        assert json.loads(data[offset:data.index(b"\n", offset)])["id"] == document.id
    assert documents[0].title and '"' not in documents[0].title  # wiki-18's quoted title line


def test_the_index_answers_as_brute_force_cosine_does_and_reopens_from_disk(sample):
    import numpy as np

    corpus, _qa, encoder, folder, rows = sample
    documents = load_corpus_jsonl(corpus)
    index = DenseIndex.open(folder)
    assert len(index) == len(documents)
    assert index.fingerprint == corpus_fingerprint(documents)  # the BM25 index's key for the same corpus
    question = rows[0]["question"]
    hits = index.search(question, k=5)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    by_id = {d.id: d for d in documents}
    assert all(h.document == by_id[h.document.id] for h in hits)  # read back from the file at its offset
    e5 = E5Encoder(encoder, max_length=64)
    passages = e5.encode([d.contents() for d in documents], "passage: ")
    scores = passages @ e5.encode([question], "query: ")[0]
    assert [h.document.id for h in hits] == [documents[i].id for i in np.argsort(-scores, kind="stable")[:5]]
    assert np.allclose([h.score for h in hits], np.sort(scores)[::-1][:5], atol=1e-5)
    again = DenseIndex.open(folder)  # a new process's view: the same files, the same answers
    assert again.search(question, k=5) == hits
    assert index.by_id[hits[0].document.id] == hits[0].document and "no-such-id" not in index.by_id
    payload = pickle.dumps(index)
    assert len(payload) < 1024  # its folder's path, not its vectors or documents (Ray workers reopen it)
    assert pickle.loads(payload).search(question, k=5) == hits


def test_the_search_qa_domain_searches_the_dense_index(sample):
    corpus, qa, _encoder, folder, rows = sample
    domain = SearchQADomain()
    splits = domain.load_splits(n_train=4, n_search=4, n_test=4, seed=0, source="jsonl", path=str(qa),
                                dense_index=str(folder))
    assert len(splits.train) == len(splits.search) == len(splits.test) == 4
    assert isinstance(domain.index, DenseIndex)
    task = splits.test[0]
    result = domain.toolbox().tools["search"](task.view(), {"query": task.inputs["question"], "k": 3})
    assert result.ok and len(result.meta["doc_ids"]) == 3
    assert result.meta["doc_ids"] == [h.document.id for h in domain.index.search(task.inputs["question"], 3)]
    with pytest.raises(ValueError, match="built from"):
        domain.load_splits(n_train=2, n_search=2, n_test=2, source="jsonl", path=str(qa), dense_index=str(folder),
                           corpus=str(qa))


def test_the_search_tool_description_names_the_retriever_in_use(sample):
    corpus, qa, _encoder, folder, _rows = sample
    domain = SearchQADomain()
    domain.load_splits(n_train=2, n_search=2, n_test=2, seed=0, source="jsonl", path=str(qa), dense_index=str(folder))
    assert "by cosine similarity of tiny-encoder embeddings (dense retrieval)" in domain.tools_description
    assert "BM25" not in domain.tools_description
    assert "BM25" in SearchQADomain.tools_description  # other domains' descriptions are untouched
    domain.load_splits(n_train=2, n_search=2, n_test=2, seed=0, source="jsonl", path=str(qa), corpus=str(corpus))
    assert domain.tools_description == SearchQADomain.tools_description  # back on BM25, back to its text
