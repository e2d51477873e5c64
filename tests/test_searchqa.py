"""Search QA: loaders, BM25 retrieval and its cache, the generated world, splits,
verifier, behaviour flags, harnesses and mechanisms."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from whalekit.domains.base import get_domain
from whalekit.domains.mechanisms import apply_mechanism
from whalekit.domains.searchqa import FAMILIES, TWO_HOP, SearchQADomain
from whalekit.domains.searchqa.data import (
    DataFormatError,
    load_corpus_jsonl,
    load_hotpotqa,
    load_qa_jsonl,
    title_doc_id,
)
from whalekit.domains.searchqa.mechanisms import CATALOGUE
from whalekit.domains.searchqa.retrieval import BM25Index
from whalekit.domains.searchqa.splits import family_quotas
from whalekit.domains.searchqa.verifier import (
    FAILURE_MODES,
    contains_answer,
    exact_match,
    failure_mode,
    normalize_answer,
    token_f1,
)
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, ToolRequest, load_harness
from whalekit.types import Message, Task, ToolResult, Trajectory, Turn

FIXTURES = Path(__file__).parent / "fixtures" / "searchqa"


@pytest.fixture(scope="module")
def domain() -> SearchQADomain:
    return SearchQADomain()


@pytest.fixture(scope="module")
def splits(domain):
    return domain.load_splits(n_train=256, n_search=64, n_test=64, seed=0)


# --- loaders ---------------------------------------------------------------------------

def test_hotpotqa_hf_layout_pools_paragraphs_by_title():
    corpus, examples = load_hotpotqa(FIXTURES / "hotpot_hf.jsonl")
    assert [e.id for e in examples] == ["hf-001", "hf-002", "hf-003"]
    assert sorted(d.title for d in corpus) == ["Halden Moor", "Kestrel Bay", "Lena Marsh", "Orford"]
    lena = next(d for d in corpus if d.title == "Lena Marsh")
    assert lena.text == "Lena Marsh (1902-1977) was an English painter. She was born in Orford."
    assert examples[0].answers == ["Tamble"]
    assert examples[0].gold_doc_ids == [title_doc_id("Lena Marsh"), title_doc_id("Orford")]
    assert examples[0].meta["type"] == "bridge" and examples[0].meta["row"] == "1"


def test_hotpotqa_original_layout_is_read_the_same_way():
    corpus, examples = load_hotpotqa(FIXTURES / "hotpot_original.json")
    assert [e.id for e in examples] == ["orig-001", "orig-002"]
    assert {d.title for d in corpus} == {"Ardley Quartet", "Tomas Ardley", "Brecon Hall"}
    assert examples[0].gold_doc_ids == [title_doc_id("Ardley Quartet"), title_doc_id("Tomas Ardley")]


def test_nq_open_questions_and_user_corpus():
    examples = load_qa_jsonl(FIXTURES / "nq_open.jsonl", subset="nq_open")
    assert len(examples) == 4
    assert examples[1].answers == ["the River Tamble", "Tamble"]
    assert {e.subset for e in examples} == {"nq_open"}
    assert len({e.id for e in examples}) == 4
    corpus = load_corpus_jsonl(FIXTURES / "corpus.jsonl")
    assert [d.id for d in corpus] == ["doc-1", "doc-2", "doc-3", "doc-4", "doc-5"]
    assert corpus[4].title == "Kestrel Bay" and corpus[4].text.startswith("Kestrel Bay is a bay")  # `contents` form


def test_generic_qa_jsonl_keeps_subsets_and_gold_documents():
    examples = load_qa_jsonl(FIXTURES / "qa_generic.jsonl")
    assert [e.subset for e in examples] == ["bamboogle", "bamboogle", "popqa"]
    assert examples[0].answers == ["cello", "violoncello"]
    assert examples[1].gold_doc_ids == ["doc-2"]
    assert examples[2].id == "popqa-1"


@pytest.mark.parametrize("lines, message", [
    (['{"question": "a?", "answer": ["x"]}', '{"question": "b?"}'], r"bad\.jsonl:2: no answer field"),
    (['{"question": "a?", "answer": ["x"]}', "", '{"question": "b?", "answer": [}'],
     r"bad\.jsonl:3: invalid JSON"),
    (['{"question": 5, "answer": ["x"]}'], r"bad\.jsonl:1: field 'question' should be str"),
    (['{"question": "a?", "answer": []}'], r"bad\.jsonl:1: field 'answer'"),
])
def test_malformed_qa_rows_name_file_and_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=message):
        load_qa_jsonl(path)


def test_malformed_corpus_and_hotpot_rows_name_file_and_row(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    duplicate = r"corpus\.jsonl:2: duplicate document id 'a' \(first at .*corpus\.jsonl:1\)"
    with pytest.raises(DataFormatError, match=duplicate):
        load_corpus_jsonl(corpus)
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"_id": "q", "question": "?", "answer": "x", "context": [["only a title"]]}]))
    bad_context = r"hotpot\.json:1: context entry 1 should be \[title, \[sentences\]\]"
    with pytest.raises(DataFormatError, match=bad_context):
        load_hotpotqa(hotpot)


def test_file_sources_become_disjoint_splits_and_the_searched_corpus():
    domain = SearchQADomain()
    splits = domain.load_splits(n_train=1, n_search=1, n_test=2, seed=0, source="nq_open",
                                path=FIXTURES / "nq_open.jsonl", corpus=FIXTURES / "corpus.jsonl")
    questions = [t.inputs["question"] for s in (splits.train, splits.search, splits.test) for t in s]
    assert len(set(questions)) == 4
    assert {t.subset for t in splits.test} == {"nq_open"}
    assert domain.index.documents[0].id == "doc-1"
    with pytest.raises(ValueError, match="need 5 distinct items"):
        domain.load_splits(n_train=2, n_search=1, n_test=2, source="nq_open", path=FIXTURES / "nq_open.jsonl",
                           corpus=FIXTURES / "corpus.jsonl")


# --- real data (developers' machines only) ----------------------------------------------

def test_real_hotpotqa_and_nq_open_load_completely(realdata):
    _, dev = load_hotpotqa(realdata / "hotpotqa" / "dev.jsonl")
    _, test = load_hotpotqa(realdata / "hotpotqa" / "test.jsonl")
    assert (len(dev), len(test)) == (300, 500)
    assert all(len(e.gold_doc_ids) == 2 for e in dev + test)
    nq = load_qa_jsonl(realdata / "nq_open" / "NQ-open.dev.jsonl", subset="nq_open")
    efficient = load_qa_jsonl(realdata / "nq_open" / "NQ-open.efficientqa.dev.1.1.jsonl", subset="nq_open")
    assert (len(nq), len(efficient)) == (3610, 1800)
    assert Counter(len(e.answers) for e in nq)[1] == 2076


def test_bm25_finds_a_gold_hotpotqa_paragraph_in_the_top_10_for_most_questions(realdata, tmp_path):
    corpus, examples = load_hotpotqa(realdata / "hotpotqa" / "dev.jsonl")
    index = BM25Index.load_or_build(corpus, cache_root=tmp_path)
    found = [bool(set(e.gold_doc_ids) & {h.document.id for h in index.search(e.question, k=10)}) for e in examples]
    recall = sum(found) / len(found)
    print(f"HotpotQA dev: {len(corpus)} pooled paragraphs, gold paragraph in BM25 top 10 for {recall:.1%}")
    assert recall > 0.5


# --- retrieval --------------------------------------------------------------------------

def test_index_is_cached_on_disk_by_corpus_and_reloads_fast(monkeypatch, tmp_path, domain):
    monkeypatch.setenv("WHALEKIT_CACHE", str(tmp_path))
    documents = domain.world.documents
    built = BM25Index.load_or_build(documents)
    cached = list((tmp_path / "bm25").iterdir())
    assert [p.name for p in cached] == [f"v1-{built.fingerprint}"]
    start = time.perf_counter()
    loaded = BM25Index.load_or_build(documents)
    assert time.perf_counter() - start < 0.5
    query = domain.world.people[3].name
    assert [h.document.id for h in loaded.search(query, 5)] == [h.document.id for h in built.search(query, 5)]
    BM25Index.load_or_build(documents[:-1])  # another corpus, another cache entry
    assert len(list((tmp_path / "bm25").iterdir())) == 2


def test_search_tool_returns_ranked_documents_with_ids_and_scores(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    result = domain.toolbox().run(get_tool_call("search", query=task.inputs["question"], k=3), task.view())
    assert result.ok and len(result.meta["doc_ids"]) == 3
    assert result.meta["scores"] == sorted(result.meta["scores"], reverse=True)
    assert result.meta["doc_ids"][0] == task.meta["gold_doc_ids"][0]
    assert result.output.startswith("[1] ")
    empty = domain.toolbox().run(get_tool_call("search", query="  "), task.view())
    assert not empty.ok and empty.error == "bad_arguments"
    nothing = domain.toolbox().run(get_tool_call("search", query="zzqxv"), task.view())
    assert nothing.ok and nothing.meta["doc_ids"] == [] and "No documents matched" in nothing.output
    clamped = domain.toolbox().run(get_tool_call("search", query="city", k=500), task.view())
    assert clamped.meta["k"] == 20


def get_tool_call(name, **arguments):
    from whalekit.types import ToolCall

    return ToolCall(name, arguments)


# --- generated world and splits ---------------------------------------------------------

def test_every_generated_question_is_retrievable_by_its_gold_hop_queries(domain, splits):
    index = domain.index
    top: dict[str, list[str]] = {}
    for task in splits.train + splits.search + splits.test:
        queries, gold = task.meta["gold_queries"], task.meta["gold_doc_ids"]
        assert len(queries) == len(gold) == (2 if task.subset in TWO_HOP else 1)
        for query, doc_id in zip(queries, gold):
            if query not in top:
                top[query] = [h.document.id for h in index.search(query, 3)]
            assert doc_id in top[query], f"{task.id}: {query!r} does not find {doc_id} in the top 3"
        assert any(contains_answer(index.by_id[d].contents(), task.reference) for d in gold), task.id


def test_two_hop_questions_need_a_second_search(domain, splits):
    bridge = [t for t in splits.train if t.subset in ("birth_country", "founder_birthplace", "org_country")]
    answered_by_one_search = [
        any(contains_answer(h.document.contents(), t.reference) for h in domain.index.search(t.inputs["question"], 5))
        for t in bridge]
    assert len(bridge) >= 30 and sum(answered_by_one_search) / len(bridge) < 0.25


def test_world_is_deterministic_and_names_are_unique_keys():
    a, b = SearchQADomain().world, SearchQADomain().world
    assert a.documents == b.documents
    assert SearchQADomain(world_seed=1).world.documents != a.documents
    tokens = [w.lower() for p in a.people for w in (p.first, p.last)] + [c.name.lower() for c in a.cities]
    assert len(tokens) == len(set(tokens))


def test_generated_splits_are_disjoint_by_person_and_question(splits):
    def people(tasks):
        return {doc for t in tasks for doc in t.meta["gold_doc_ids"] if doc.startswith("p")}

    parts = (splits.train, splits.search, splits.test)
    assert [len(p) for p in parts] == [256, 64, 64]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not people(parts[i]) & people(parts[j])
            assert not {t.inputs["question"] for t in parts[i]} & {t.inputs["question"] for t in parts[j]}
    assert Counter(t.subset for t in splits.test) == Counter(family_quotas(64, SearchQADomain().mix))
    assert set(t.subset for t in splits.test) == set(FAMILIES)


def test_generated_splits_are_seeded(domain, splits):
    again = domain.load_splits(n_train=256, n_search=64, n_test=64, seed=0)
    other = domain.load_splits(n_train=256, n_search=64, n_test=64, seed=1)
    assert [t.id for t in again.test] == [t.id for t in splits.test]
    assert [t.id for t in other.test] != [t.id for t in splits.test]


def test_a_world_too_small_for_the_splits_says_what_to_change():
    with pytest.raises(ValueError, match="raise n_people/n_orgs"):
        SearchQADomain(n_people=20, n_orgs=10).load_splits(n_train=200, n_search=0, n_test=10)


def test_family_quotas_follow_the_mix():
    assert family_quotas(10, {"birthplace": 3, "occupation": 1, "born_first": 1}) == {
        "birthplace": 6, "occupation": 2, "born_first": 2}
    with pytest.raises(ValueError, match="unknown question families"):
        family_quotas(4, {"capital": 1})


# --- verifier ---------------------------------------------------------------------------

def test_normalisation_strips_case_punctuation_and_articles():
    assert normalize_answer("  The Eiffel-Tower!! ") == "eiffeltower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert exact_match("the River Tamble.", ["Tamble", "River Tamble"])
    assert not exact_match("Tamble river bank", ["Tamble"])
    assert not exact_match(None, ["x"])


def test_token_f1_is_reported_alongside(domain):
    assert token_f1("in Orford town", ["Orford"]) == pytest.approx(0.5)
    assert token_f1("Paris", ["London", "paris"]) == 1.0
    task = Task("q", "searchqa", {"question": "?"}, ["Lena Marsh", "Marsh"])
    verdict = domain.verify(task, "painter Lena Marsh")
    assert not verdict.correct and verdict.reward == 0.0 and verdict.details["f1"] == pytest.approx(0.8)
    for garbage in (None, "", "\x00<answer>", "🙂" * 50):
        assert domain.verify(task, garbage).reward == 0.0


def test_contains_answer_matches_whole_words_only():
    assert contains_answer("Orford is on the River Tamble.", ["tamble"])
    assert not contains_answer("The Tambles are hills.", ["Tamble"])


# --- behaviour flags and failure modes ---------------------------------------------------

def _trajectory(turn_results, final_answer, correct, feedback=0, initial=()):
    turns = [Turn([], [], "", "stop", tool_results=list(r)) for r in turn_results]
    messages = [Message("user", "fix it", kind="feedback") for _ in range(feedback)]
    flags = {"initial_tool_results": [{"name": "search", "ok": True, "meta": m} for m in initial]} if initial else {}
    return Trajectory("q", "searchqa", "h", 0, turns=turns, messages=messages, final_answer=final_answer,
                      correct=correct, flags=flags)


def test_behaviour_flags_measure_format_hits_and_searches(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    gold, other = task.meta["gold_doc_ids"][0], "c00"
    hit = ToolResult("search", "", meta={"doc_ids": [other, gold]})
    miss = ToolResult("search", "", meta={"doc_ids": [other]})
    trajectory = _trajectory([[miss], [hit]], task.reference[0], True)
    flags = domain.behaviour(trajectory, task, domain.verify(task, trajectory.final_answer))
    assert flags["format_valid"] and flags["retrieval_hit"] and flags["correct_given_hit"] and flags["hit_and_correct"]
    assert flags["searches"] == 2 and flags["model_searches"] == 2 and flags["documents_retrieved"] == 3
    forced = _trajectory([], "nowhere", False, feedback=1, initial=[{"doc_ids": [other]}])
    flags = domain.behaviour(forced, task, domain.verify(task, forced.final_answer))
    assert not flags["format_valid"] and flags["format_errors"] == 1
    assert flags["searches"] == 1 and flags["model_searches"] == 0 and not flags["retrieval_hit"]
    assert "correct_given_hit" not in flags  # undefined without a hit


def test_failure_mode_names_the_first_broken_link():
    def mode(**kwargs):
        t = Trajectory("q", "searchqa", "h", 0, final_answer=kwargs.pop("answer", "x"), correct=False,
                       flags={"searches": 1, "retrieval_hit": True} | kwargs)
        return failure_mode(t)

    assert mode(answer=None) == "no_answer"
    assert mode(searches=0) == "no_search"
    assert mode(retrieval_hit=False) == "retrieval_miss"
    assert mode() == "wrong_answer_given_hit"
    assert mode(context_overflow=True) == "context_overflow"
    assert set(FAILURE_MODES) == set(SearchQADomain.failure_modes)


# --- harnesses and mechanisms ------------------------------------------------------------

def drive(source, task, replies, domain):
    """Run one episode with scripted model replies; returns (answer, tool calls made)."""
    driver = EpisodeDriver(load_harness(source), task.view())
    request, replies, calls = driver.begin(), list(replies), 0
    toolbox = domain.toolbox()
    while not isinstance(request, Finished):
        if isinstance(request, ToolRequest):
            calls += len(request.calls)
            request = driver.after_tools([toolbox.run(c, task.view()) for c in request.calls])
        else:
            assert isinstance(request, GenerateRequest)
            request = driver.after_generation(replies.pop(0) if replies else "", request.settings.prefill)
    return request.answer, calls


def test_h0_searches_then_answers(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    source = domain.initial_harness_source()
    answer, calls = drive(source, task, [f"<search>{task.meta['gold_queries'][0]}</search>",
                                         f"<answer>{task.reference[0]}</answer>"], domain)
    assert calls == 1 and domain.verify(task, answer).correct
    answer, _ = drive(source, task, ["I do not know."] * 4, domain)
    assert answer is None


def _h0_episode(domain, task, replies):
    """h0 with scripted replies; returns (answer, the prompts it built, the tool calls it made)."""
    driver = EpisodeDriver(load_harness(domain.initial_harness_source()), task.view())
    request, replies, prompts, calls = driver.begin(), list(replies), [], []
    while not isinstance(request, Finished):
        if isinstance(request, ToolRequest):
            calls += request.calls
            request = driver.after_tools([domain.toolbox().run(c, task) for c in request.calls])
        else:
            prompts.append(request)
            request = driver.after_generation(replies.pop(0) if replies else "", request.settings.prefill)
    return request.answer, prompts, calls


def test_h0_is_the_authors_minimal_prompt_with_one_top1_search_cut_to_200_tokens(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    query = task.meta["gold_queries"][0]
    answer, prompts, calls = _h0_episode(domain, task, [f"<search>{query}</search> <search>other</search>",
                                                        f"<answer>{task.reference[0]}</answer>"])
    system, user = prompts[0].messages
    assert system.content.startswith("Answer factual questions using search when needed.")
    assert user.content.startswith("Question: " + task.inputs["question"] + "\nUse the search tool")
    assert "<answer>...</answer>" in user.content
    assert prompts[0].settings.stop == ["</search>"]
    assert [c.arguments for c in calls] == [{"query": query, "k": 1, "max_doc_tokens": 200}]  # first query only
    shown = prompts[1].messages[-1].content
    assert shown.startswith('<tool_response>\n{"result": "Doc 1 (Title: ') and shown.count("Doc ") == 1
    assert domain.verify(task, answer).correct


def test_h0_ends_at_the_first_turn_without_a_search_and_reads_the_innermost_answer(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    answer, prompts, calls = _h0_episode(domain, task, ["<answer>x<answer>Ostin</answer> then", "<answer>y</answer>"])
    assert answer == "Ostin" and len(prompts) == 1 and not calls
    answer, prompts, _ = _h0_episode(domain, task, ["I think <answer>Ostin", "<answer>y</answer>"])
    assert answer is None and len(prompts) == 1  # an unclosed tag is no answer, and there is no retry


def test_h0_has_two_turns_and_answers_from_the_last_one(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    replies = ["<answer>early</answer><search>a</search>", "<search>b</search>", "<answer>late</answer>"]
    answer, prompts, calls = _h0_episode(domain, task, replies)
    assert len(prompts) == 2 and len(calls) == 2 and answer is None  # the last turn searched: no answer in it


def test_the_search_tool_cuts_each_document_to_max_doc_tokens(domain, splits):
    from whalekit.domains.searchqa.retrieval import cut_to_tokens

    assert cut_to_tokens("Ostin is a city, in Valmar.", 4) == "Ostin is a city"
    assert cut_to_tokens("Ostin is a city, in Valmar.", 5) == "Ostin is a city,"
    assert cut_to_tokens("short", 200) == "short"
    task = splits.test[0]
    result = domain.toolbox().run(get_tool_call("search", query=task.inputs["question"], k=3, max_doc_tokens=3),
                                  task.view())
    assert all(len(d["text"].split()) <= 3 for d in result.meta["documents"])


def test_h1_forces_a_search_and_prefills_the_answer(domain, splits):
    task = next(t for t in splits.test if t.subset == "birthplace")
    harness = load_harness(domain.harness_source("h1"))
    assert harness.initial_tool_calls(task.view())[0].name == "search"
    answer, calls = drive(domain.harness_source("h1"), task, [f"{task.reference[0]}.</answer>"], domain)
    assert calls == 1 and domain.verify(task, answer).correct


def test_the_catalogue_lists_every_mechanism_once(domain):
    assert 6 <= len(CATALOGUE) <= 10
    assert len({m.name for m in CATALOGUE}) == len(CATALOGUE)
    assert [m.name for m in domain.mechanisms()] == [m.name for m in CATALOGUE]
    for mechanism in CATALOGUE:
        assert set(mechanism.targets) <= set(FAILURE_MODES), mechanism.name


@pytest.mark.parametrize("mechanism", CATALOGUE, ids=lambda m: m.name)
def test_each_mechanism_applies_to_h0_and_runs(domain, splits, mechanism):
    task = next(t for t in splits.test if t.subset == "occupation")
    source = apply_mechanism(domain.initial_harness_source(), mechanism)
    assert source != domain.initial_harness_source()
    replies = [f"<search>{task.meta['gold_queries'][0]}</search>", f"<answer>{task.reference[0]}</answer>"]
    answer, _ = drive(source, task, replies, domain)
    assert answer is not None


def test_all_mechanisms_compose(domain, splits):
    task = next(t for t in splits.test if t.subset == "occupation")
    source = domain.initial_harness_source()
    for mechanism in CATALOGUE:
        source = apply_mechanism(source, mechanism)
    harness = load_harness(source)
    assert (harness.docs_shown, harness.doc_chars, harness.max_turns) == (2, 200, 6)
    answer, calls = drive(source, task, [f"{task.reference[0]}</answer>"], domain)
    assert calls == 1 and domain.verify(task, answer).correct


def test_the_registry_builds_the_domain():
    domain = get_domain("searchqa")
    assert isinstance(domain, SearchQADomain) and "search(query" in domain.tools_description


def test_the_bm25_tool_description_is_the_one_the_records_were_made_with():
    """The local proposer's requests are stored by content hash and replayed: its prompt, which
    quotes this description, must stay byte-identical while BM25 is the retriever."""
    import hashlib

    domain = SearchQADomain()
    domain.load_splits(n_train=2, n_search=2, n_test=2, seed=0)  # the generated world, searched by BM25
    for text in (SearchQADomain.tools_description, domain.tools_description):
        assert hashlib.sha256(text.encode()).hexdigest() == \
            "533c08c61c2759f5ac6843f3009da1ff36ff45401e038869e2c2d47f883aa164"


# --- end to end with SmolLM2 -------------------------------------------------------------

@pytest.mark.slow
def test_h0_rollout_with_smollm2_is_verified_and_flagged(smollm_policy):
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout

    domain = SearchQADomain()
    tasks = domain.load_splits(n_train=0, n_search=0, n_test=7, seed=0).test
    runtime = InProcessHarness(domain.initial_harness_source())
    episodes = [Episode(t, runtime, i) for t in tasks[:4] for i in range(2)]
    trajectories = rollout(domain, episodes, smollm_policy.sampler, RolloutConfig(seed=0, progress=False))
    assert len(trajectories) == 8
    for t in trajectories:
        assert t.turns and t.error is None or (t.error or "").startswith("context_overflow")
        assert t.reward in (0.0, 1.0)
        assert {"format_valid", "retrieval_hit", "searches", "hit_and_correct", "f1"} <= set(t.flags)
        assert domain.failure_mode(t) in (None, *FAILURE_MODES)
