"""Dense retrieval as the authors ran it (Search-R1's retriever, which their search QA launcher
serves: e5-base-v2 with mean pooling, "query: " / "passage: " prefixes, unit-length
embeddings, a FAISS flat inner-product index over wiki-18): built once into a folder, then
opened from disk by every process that searches, the index memory-mapped (the pages are
shared, not copied per process) and each hit's text read from the corpus file by its byte
offset, so no process holds the corpus in memory. A `DenseIndex` pickles as its folder's
path (Ray workers reopen it rather than receive it through the object store).

    build_dense_index("data/wiki/corpus.jsonl", "models/e5-base-v2", "data/wiki/e5-flat")   # once
    hits = DenseIndex.open("data/wiki/e5-flat").search("who wrote hamlet", k=3)

Command line: `python -m whalekit.domains.searchqa.dense CORPUS ENCODER OUT [--batch-size N]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from whalekit.domains.searchqa.data import DataFormatError, Document, corpus_document
from whalekit.domains.searchqa.retrieval import Hit

SCHEMA_VERSION = 1
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "  # e5's asymmetric prefixes
MAX_LENGTH = 256  # tokens per query or passage (Search-R1's index builder and server)
INSTALL_HINT = "pip install 'whalekit[dense]' (faiss-cpu; GPU machines: faiss-gpu)"


def iter_corpus(path: str | Path) -> Iterator[tuple[int, Document]]:
    """(byte offset, Document) per row of a corpus jsonl, read a line at a time: wiki-18's 21M
    passages (14 GB) never sit in memory as one string. Blank lines are skipped."""
    path = Path(path)
    with path.open("rb") as handle:
        offset = 0
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFormatError(f"{path}:{number}: invalid JSON ({exc.msg})") from exc
                yield offset, corpus_document(row, f"{path}:{number}")
            offset += len(line)


class E5Encoder:
    """A transformers encoder used e5's way: a prefix, mean pooling over the real tokens, unit
    length. `device` None: CUDA where present (half precision there), else CPU float32."""

    def __init__(self, path: str | Path, max_length: int = MAX_LENGTH, device: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(self.device).eval()
        self.max_length = max_length

    def encode(self, texts: list[str], prefix: str) -> Any:
        """(len(texts), dim) float32 numpy array of unit vectors."""
        import torch

        batch = self.tokenizer([prefix + t for t in texts], padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state.float()
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()


def build_dense_index(corpus: str | Path, encoder: str | Path, out: str | Path, batch_size: int = 256,
                      max_length: int = MAX_LENGTH, device: str | None = None) -> Path:
    """Encode every passage of `corpus` ("passage: " + title and text) and write the folder
    `out`: index.faiss (flat inner product), offsets.npy (each row's byte offset in the corpus),
    ids.npy + id_rows.npy (ids sorted, for lookups by id) and manifest.json. Written to a
    temporary folder and renamed, so a half-built index is never opened. The flat index is held
    in memory while it is built (wiki-18 at 768 dimensions: 61 GB)."""
    faiss = _faiss()
    corpus, out = Path(corpus).resolve(), Path(out)
    model = E5Encoder(encoder, max_length, device)
    digest = hashlib.sha256()  # the BM25 index's corpus_fingerprint, computed while streaming
    offsets: list[int] = []
    ids: list[str] = []
    index: Any = None
    pending: list[Document] = []

    def flush() -> None:
        nonlocal index
        vectors = model.encode([d.contents() for d in pending], PASSAGE_PREFIX)
        if index is None:
            index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        pending.clear()

    for offset, document in iter_corpus(corpus):
        for part in (document.id, document.title, document.text):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
        offsets.append(offset)
        ids.append(document.id)
        pending.append(document)
        if len(pending) >= batch_size:
            flush()
    if pending:
        flush()
    if index is None:
        raise DataFormatError(f"{corpus}: empty corpus")
    order = np.argsort(np.array(ids))
    sorted_ids = np.array(ids)[order]
    repeated = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if len(repeated):
        raise DataFormatError(f"{corpus}: duplicate document id {sorted_ids[repeated[0]]!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        faiss.write_index(index, str(tmp / "index.faiss"))
        np.save(tmp / "offsets.npy", np.array(offsets, dtype=np.int64))
        np.save(tmp / "ids.npy", sorted_ids)
        np.save(tmp / "id_rows.npy", order.astype(np.int64))
        manifest = {"schema_version": SCHEMA_VERSION, "corpus": str(corpus), "corpus_bytes": corpus.stat().st_size,
                    "fingerprint": digest.hexdigest()[:16], "encoder": str(encoder), "documents": len(offsets),
                    "dimensions": int(index.d), "max_length": max_length, "pooling": "mean", "normalised": True,
                    "query_prefix": QUERY_PREFIX, "passage_prefix": PASSAGE_PREFIX, "faiss": "IndexFlatIP"}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class DocumentsById(Mapping[str, Document]):
    """Documents of the corpus by id, read from the file on demand (binary search in the
    memory-mapped sorted ids): the `by_id` a `Retriever` offers, without a dict of 21M rows."""

    def __init__(self, index: DenseIndex):
        self.index = index

    def __getitem__(self, doc_id: str) -> Document:
        ids = self.index.sorted_ids
        position = int(np.searchsorted(ids, doc_id))
        if position >= len(ids) or ids[position] != doc_id:
            raise KeyError(doc_id)
        return self.index.document(int(self.index.id_rows[position]))

    def __iter__(self) -> Iterator[str]:
        return (str(i) for i in self.index.sorted_ids)

    def __len__(self) -> int:
        return len(self.index.sorted_ids)


class DenseIndex:
    """A built dense index opened from its folder: `search(query, k)` -> Hits, as BM25Index.
    Thread-safe (the engine runs tool calls of many episodes concurrently)."""

    def __init__(self, folder: str | Path, encoder: str | Path | None = None, device: str | None = None,
                 gpu: bool = False):
        faiss = _faiss()
        self.folder = Path(folder)
        manifest_path = self.folder / "manifest.json"
        if not manifest_path.exists():
            raise FileNotFoundError(f"{self.folder} holds no dense index (no manifest.json): build it with "
                                    "python -m whalekit.domains.searchqa.dense CORPUS ENCODER OUT")
        self.manifest = json.loads(manifest_path.read_text())
        if self.manifest.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{self.folder}: dense index schema {self.manifest.get('schema_version')}, "
                             f"this whalekit reads {SCHEMA_VERSION}: build it again")
        self.corpus = Path(self.manifest["corpus"])
        if not self.corpus.is_file() or self.corpus.stat().st_size != self.manifest["corpus_bytes"]:
            raise ValueError(f"{self.folder}: its corpus {self.corpus} is missing or has changed since the index "
                             "was built: build it again")
        self.fingerprint = str(self.manifest["fingerprint"])
        self.encoder_path, self.device, self.gpu = encoder or self.manifest["encoder"], device, gpu
        mapped = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY  # the vectors stay in the file's pages
        self.index = faiss.read_index(str(self.folder / "index.faiss"), mapped)
        if gpu:  # GPU FAISS where present: the vectors are copied to the GPUs
            self.index = faiss.index_cpu_to_all_gpus(self.index)
        self.offsets = np.load(self.folder / "offsets.npy", mmap_mode="r")
        self.sorted_ids = np.load(self.folder / "ids.npy", mmap_mode="r")
        self.id_rows = np.load(self.folder / "id_rows.npy", mmap_mode="r")
        self.by_id = DocumentsById(self)
        self._encoder: E5Encoder | None = None  # loaded at the first search
        self._lock = threading.Lock()

    @classmethod
    def open(cls, folder: str | Path, encoder: str | Path | None = None, device: str | None = None,
             gpu: bool = False) -> DenseIndex:
        """The index built in `folder` (its encoder as recorded, unless `encoder` names another copy)."""
        return cls(folder, encoder, device, gpu)

    def __len__(self) -> int:
        return int(self.manifest["documents"])

    def document(self, row: int) -> Document:
        """The corpus's row-th document, read at its offset."""
        with self.corpus.open("rb") as handle:
            handle.seek(int(self.offsets[row]))
            line = handle.readline()
        return corpus_document(json.loads(line), f"{self.corpus}@{int(self.offsets[row])}")

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Top-k documents by inner product of unit e5 embeddings (cosine similarity)."""
        if k <= 0 or not query.strip():
            return []
        with self._lock:
            if self._encoder is None:
                self._encoder = E5Encoder(self.encoder_path, int(self.manifest["max_length"]), self.device)
            vector = self._encoder.encode([query], str(self.manifest["query_prefix"]))
            scores, rows = self.index.search(vector, min(k, len(self)))
        return [Hit(self.document(int(row)), float(score), rank)
                for rank, (row, score) in enumerate(zip(rows[0].tolist(), scores[0].tolist()), 1) if row >= 0]

    # Pickled as where it lives: a Ray worker (or any process) reopens it from disk.
    def __getstate__(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "encoder": str(self.encoder_path), "device": self.device, "gpu": self.gpu}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"], encoder=state["encoder"], device=state["device"],  # type: ignore[misc]
                      gpu=state["gpu"])


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(f"dense retrieval needs faiss: {INSTALL_HINT} ({exc})") from exc
    return faiss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build a dense (e5, FAISS flat) index of a corpus jsonl.")
    parser.add_argument("corpus", help="corpus jsonl: id + title/text, or id + contents (wiki-18)")
    parser.add_argument("encoder", help="a local transformers encoder directory, e.g. e5-base-v2")
    parser.add_argument("out", help="the index folder to write")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    out = build_dense_index(args.corpus, args.encoder, args.out, args.batch_size, args.max_length, args.device)
    print(f"{out}: {DenseIndex(out, device=args.device).manifest['documents']} documents")


if __name__ == "__main__":
    main()
