"""Readers for real search-QA files: HotpotQA (distractor setting), NQ-open style QA
jsonl, and a generic "QA jsonl + corpus jsonl" pair so any test set (the paper's seven
included, e.g. FlashRAG's `golden_answers` files) can be brought as plain files.

Every reader returns plain records (`Document`, `QAExample`) and fails on a malformed
row with an error `path:line: reason` (1-based; in a .json array the line where the item
starts), because a silent skip would change a test set without anyone noticing.

    corpus, examples = load_hotpotqa("dev.jsonl")          # pooled paragraphs become the corpus
    examples = load_qa_jsonl("NQ-open.dev.jsonl"); corpus = load_corpus_jsonl("wiki.jsonl")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.infra.errors import DataError
from whalekit.infra.runs import read_jsonl


class DataFormatError(DataError):
    """A row that does not match the expected layout; the message names file and row."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    def contents(self) -> str:
        """What the index sees and what a harness shows: title line, then the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass
class QAExample:
    id: str
    question: str
    answers: list[str]  # any of them is correct
    subset: str = "default"
    gold_doc_ids: list[str] = field(default_factory=list)  # supporting documents, when the file names them
    meta: dict[str, Any] = field(default_factory=dict)  # provenance: file, row, type, level...


def corpus_fingerprint(documents: list[Document]) -> str:
    """Content hash of a corpus: same documents in the same order, same hash (index cache key)."""
    digest = hashlib.sha256()
    for doc in documents:
        for part in (doc.id, doc.title, doc.text):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
    return digest.hexdigest()[:16]


def title_doc_id(title: str) -> str:
    """Stable id for a paragraph known only by its (Wikipedia) title."""
    return "t-" + hashlib.sha1(title.encode("utf-8")).hexdigest()[:12]


def _rows(path: Path) -> Iterator[tuple[str, int, Any]]:
    """Yield (location 'FILE:LINE', row number, parsed row) from a .jsonl file (row number:
    the line) or a .json array (row number: the item, 1-based; LINE: where it starts)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            json.loads(text)  # the whole array is valid JSON before any item is read
        except json.JSONDecodeError as exc:
            raise DataFormatError.at(path, exc.lineno, f"invalid JSON ({exc.msg})") from exc
        decoder, position, line = json.JSONDecoder(), text.index("[") + 1, 1 + text.count("\n", 0, text.index("["))
        number = 0
        while True:
            start = position
            while position < len(text) and text[position] in " \t\r\n,":
                position += 1
            line += text.count("\n", start, position)
            if position >= len(text) or text[position] == "]":
                return
            item, end = decoder.raw_decode(text, position)
            number += 1
            yield f"{path}:{line}", number, item
            line += text.count("\n", position, end)
            position = end
    for number, row in read_jsonl(path, DataFormatError, records=False):
        yield f"{path}:{number}", number, row


def _require(row: Any, key: str, kind: type | tuple[type, ...], where: str, parent: str = "") -> Any:
    name = parent + key  # e.g. "context.title"
    if not isinstance(row, dict):
        raise DataFormatError(f"{where}: expected a JSON object{' for ' + parent[:-1] if parent else ''}, "
                              f"got {type(row).__name__}")
    if key not in row:
        raise DataFormatError(f"{where}: missing field {name!r} (has {', '.join(sorted(row)) or 'nothing'})")
    value = row[key]
    if not isinstance(value, kind):
        raise DataFormatError(f"{where}: field {name!r} should be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _answers(row: dict[str, Any], where: str) -> list[str]:
    for key in ("golden_answers", "answers", "answer"):
        if key in row:
            value = row[key]
            values = [value] if isinstance(value, (str, int, float)) else value
            if not isinstance(values, list) or not values or not all(isinstance(v, (str, int, float)) for v in values):
                raise DataFormatError(f"{where}: field {key!r} should be a string or a non-empty list of strings")
            return [str(v) for v in values]
    raise DataFormatError(f"{where}: no answer field (expected 'answer', 'answers' or 'golden_answers')")


# --- HotpotQA -------------------------------------------------------------------------

def _hotpot_paragraphs(row: dict[str, Any], where: str) -> list[tuple[str, list[str]]]:
    context = _require(row, "context", (dict, list), where)
    if isinstance(context, dict):  # Hugging Face layout: {title: [...], sentences: [[...], ...]}
        titles = _require(context, "title", list, where, "context.")
        sentences = _require(context, "sentences", list, where, "context.")
        if len(titles) != len(sentences):
            raise DataFormatError(f"{where}: context has {len(titles)} titles but {len(sentences)} sentence lists")
        pairs = list(zip(titles, sentences))
    else:  # original layout: [[title, [sentences]], ...]
        pairs = []
        for i, item in enumerate(context, 1):
            if not (isinstance(item, list) and len(item) == 2):
                raise DataFormatError(f"{where}: context entry {i} should be [title, [sentences]]")
            pairs.append((item[0], item[1]))
    for title, sents in pairs:
        if not isinstance(title, str) or not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise DataFormatError(f"{where}: a context paragraph is not (title string, list of sentence strings)")
    return pairs


def _hotpot_support_titles(row: dict[str, Any], where: str) -> list[str]:
    facts = row.get("supporting_facts", [])
    if isinstance(facts, dict):
        titles = facts.get("title", [])
    elif isinstance(facts, list):
        titles = [f[0] for f in facts if isinstance(f, list) and f]
    else:
        raise DataFormatError(f"{where}: supporting_facts should be a list or an object")
    return list(dict.fromkeys(str(t) for t in titles))


def load_hotpotqa(path: str | Path, subset: str = "hotpotqa") -> tuple[list[Document], list[QAExample]]:
    """HotpotQA distractor-setting file (HF `id`/`context{title,sentences}` layout or the
    original `_id`/`[[title, sentences]]` layout; .json array or .jsonl). The paragraphs of
    all questions are pooled, one document per title, into the retrieval corpus."""
    path = Path(path)
    documents: dict[str, Document] = {}
    examples: list[QAExample] = []
    for where, number, row in _rows(path):
        qid = row.get("id", row.get("_id")) if isinstance(row, dict) else None
        if not isinstance(qid, str):
            raise DataFormatError(f"{where}: missing string field 'id' (HF layout) or '_id' (original layout)")
        question = _require(row, "question", str, where)
        answers = _answers(row, where)
        for title, sentences in _hotpot_paragraphs(row, where):
            if title not in documents:
                documents[title] = Document(title_doc_id(title), title, "".join(sentences).strip())
        gold = [title_doc_id(t) for t in _hotpot_support_titles(row, where)]
        meta = {"file": str(path), "row": str(number), "line": where.rsplit(":", 1)[-1], "type": row.get("type"),
                "level": row.get("level")}
        examples.append(QAExample(qid, question, answers, subset, gold, meta))
    if not examples:
        raise DataFormatError(f"{path}: no questions")
    return list(documents.values()), examples


# --- QA jsonl (NQ-open and the generic format) + corpus jsonl --------------------------

def load_qa_jsonl(path: str | Path, subset: str | None = None) -> list[QAExample]:
    """Questions with answer lists: NQ-open (`question`, `answer: [..]`), or the generic
    format (`id`?, `question`, `answers`/`golden_answers`/`answer`, `subset`?,
    `gold_doc_ids`?). Without an id the row is named by file stem and line."""
    path = Path(path)
    name = subset or path.stem.split(".")[0].lower()
    examples = []
    for where, row_number, row in _rows(path):
        question = _require(row, "question", str, where)
        if not question.strip():
            raise DataFormatError(f"{where}: empty question")
        answers = _answers(row, where)
        number = str(row_number)
        qid = str(row.get("id", f"{path.stem}-{number}"))
        gold = row.get("gold_doc_ids", [])
        if not isinstance(gold, list):
            raise DataFormatError(f"{where}: gold_doc_ids should be a list of document ids")
        row_subset = row.get("subset", name) if subset is None else subset
        examples.append(QAExample(qid, question, answers, str(row_subset), [str(g) for g in gold],
                                  {"file": str(path), "row": number, "line": where.rsplit(":", 1)[-1]}))
    if not examples:
        raise DataFormatError(f"{path}: no questions")
    return examples


def load_corpus_jsonl(path: str | Path) -> list[Document]:
    """Retrieval corpus: one `{"id", "title"?, "text"}` per line; the FlashRAG/Pyserini
    `{"id", "contents": "title\\ntext"}` form is accepted too. Ids must be unique."""
    path = Path(path)
    documents = []
    seen: dict[str, str] = {}
    for where, _number, row in _rows(path):
        if not isinstance(row, dict) or "id" not in row:
            raise DataFormatError(f"{where}: missing field 'id'")
        doc_id = str(row["id"])
        if doc_id in seen:
            raise DataFormatError(f"{where}: duplicate document id {doc_id!r} (first at {seen[doc_id]})")
        seen[doc_id] = where
        documents.append(corpus_document(row, where))
    if not documents:
        raise DataFormatError(f"{path}: empty corpus")
    return documents


def corpus_document(row: Any, where: str) -> Document:
    """One corpus row as a Document: `{"id", "title"?, "text"}` or `{"id", "contents":
    "title\\ntext"}` (FlashRAG / Pyserini, wiki-18's form); `where` names it in errors."""
    if not isinstance(row, dict) or "id" not in row:
        raise DataFormatError(f"{where}: missing field 'id'")
    if "text" in row:
        title = row.get("title", "")
        text = _require(row, "text", str, where)
        if not isinstance(title, str):
            raise DataFormatError(f"{where}: field 'title' should be str")
    elif "contents" in row:
        contents = _require(row, "contents", str, where)
        title, _, text = contents.partition("\n")
        if not text:
            title, text = "", contents
    else:
        raise DataFormatError(f"{where}: missing field 'text' (or 'contents')")
    return Document(str(row["id"]), title.strip().strip('"'), text.strip())
