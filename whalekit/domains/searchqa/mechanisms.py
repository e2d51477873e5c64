"""Search-QA harness mechanisms: named source edits of h0 that a proposer combines.

Each targets one of the domain's failure modes (no_search, retrieval_miss, no_answer,
wrong_answer_given_hit, context_overflow). Mechanisms that share a hook cooperate
through class attributes (`docs_shown`, `doc_chars`, `forced_search`) read with
`getattr`, so they compose in any order: every one applies to h0 and to the others.

    from whalekit.domains.mechanisms import apply_mechanism
    source = apply_mechanism(h0_source, BY_NAME["forced_first_search"])
"""

from __future__ import annotations

from whalekit.domains.mechanisms import Composition, Mechanism

# The audit (docs/reproduction-v3.md): the failure modes each hook a mechanism may edit decides
# directly. A mechanism's targets plus its `alters` cover those of its hooks
# (tests/test_mechanism_audit.py); a text hook (prompts, wordings) decides none by itself.
HOOK_FAILURE_MODES: dict[str, tuple[str, ...]] = {
    "initial_tool_calls": ("no_search", "retrieval_miss", "wrong_answer_given_hit"),  # the first query, k, docs shown
    "forced_search": ("no_search",),
    "format_tool_result": ("wrong_answer_given_hit", "context_overflow"),
    "docs_shown": ("wrong_answer_given_hit", "context_overflow"),
    "doc_chars": ("wrong_answer_given_hit", "context_overflow"),
    "generation_settings": ("no_answer",),
    "parse": ("no_answer",),
    "extract_answer": ("no_answer",),
    "error_feedback": ("no_answer",),
    "few_shot": ("no_answer",),
    "max_turns": ("no_answer",),
    "system_prompt": (),
    "first_user_message": (),
}

_FORMAT_RESULTS = '''
def format_tool_result(self, result, state):
    documents = result.meta.get("documents", [])
    if not documents:
        return result.output
    shown = documents[:getattr(self, "docs_shown", len(documents))]
    cut = getattr(self, "doc_chars", 100000)
    return "\\n\\n".join(f"[{i}] {d['title']}: {d['text'][:cut]}" for i, d in enumerate(shown, 1))
'''

FORCED_FIRST_SEARCH = Mechanism(
    name="forced_first_search",
    hypothesis="A small model often answers without searching; searching the question before it speaks "
               "puts the relevant documents in front of it from the first turn.",
    targets=("no_search", "no_answer"),
    alters=("retrieval_miss", "wrong_answer_given_hit"),  # its first search picks query and k, shows the documents
    methods={
        "initial_tool_calls": '''
def initial_tool_calls(self, task):
    return [ToolCall("search", {"query": task.inputs["question"], "k": getattr(self, "docs_shown", 5)})]
''',
        "first_user_message": '''
def first_user_message(self, task, initial_results):
    shown = getattr(self, "docs_shown", 5)
    cut = getattr(self, "doc_chars", 100000)
    lines = []
    for result in initial_results:
        for i, d in enumerate(result.meta.get("documents", [])[:shown], 1):
            lines.append(f"[{i}] {d['title']}: {d['text'][:cut]}")
    found = "\\n".join(lines) or "(no documents found)"
    return f"Search results for the question:\\n{found}\\n\\nQuestion: {task.inputs['question']}"
''',
    },
    attributes={"forced_search": "True"},
    imports=("from whalekit.types import ToolCall",),
)

FEWER_DOCUMENTS = Mechanism(
    name="fewer_documents",
    hypothesis="Five full documents drown a 135M model's attention; the top two carry the answer most of the time.",
    targets=("wrong_answer_given_hit", "context_overflow"),
    methods={"format_tool_result": _FORMAT_RESULTS},
    attributes={"docs_shown": "2"},
)

TRUNCATE_DOCUMENTS = Mechanism(
    name="truncate_documents",
    hypothesis="Answers sit in the first sentences of a document; cutting each to 200 characters keeps them "
               "and removes distracting text and context overflows.",
    targets=("wrong_answer_given_hit", "context_overflow"),
    methods={"format_tool_result": _FORMAT_RESULTS},
    attributes={"doc_chars": "200"},
)

PHASE_PREFILL = Mechanism(
    name="phase_prefill",
    hypothesis="Prefilling '<search>' before any results and '<answer>' after them removes the format "
               "decision the small model gets wrong, and short generations stop it rambling.",
    targets=("no_answer", "no_search"),
    methods={"generation_settings": '''
def generation_settings(self, state):
    searched = state.tool_calls > 0 or getattr(self, "forced_search", False)
    last_turn = state.turn + 1 >= self.max_turns
    prefill = "<answer>" if searched or last_turn else "<search>"
    return GenerationSettings(max_new_tokens=32, stop=["</search>", "</answer>", "\\n"], prefill=prefill)
'''},
)

LENIENT_PARSE = Mechanism(
    name="lenient_parse",
    hypothesis="The model often answers in plain text or half-closed tags; accepting 'Search: q', "
               "'Answer: a' and a bare short line turns format errors into usable actions.",
    targets=("no_answer",),
    methods={"parse": '''
def parse(self, reply, state):
    search = (re.search(r"<search>(.*?)(?:</search>|$)", reply, re.S)
              or re.search(r"(?im)^\\s*search:\\s*(.+)$", reply))
    answer = (re.search(r"<answer>(.*?)(?:</answer>|$)", reply, re.S)
              or re.search(r"(?im)answer(?: is)?:\\s*(.+)$", reply))
    if search and search.group(1).strip() and (not answer or search.start() < answer.start()):
        return ToolCalls([ToolCall("search", {"query": search.group(1).strip(), "k": getattr(self, "docs_shown", 5)})])
    if answer and answer.group(1).strip():
        return FinalAnswer(answer.group(1).strip().split("\\n")[0].strip(" .!"))
    line = re.sub(r"<[^>]*>", "", reply).strip().split("\\n")[0].strip(" .!")
    if line and len(line.split()) <= 8:
        return FinalAnswer(line)
    return FormatError("write <search>query</search> or <answer>answer</answer>")
'''},
    imports=("import re", "from whalekit.types import ToolCall",
             "from whalekit.harness import FinalAnswer, FormatError, ToolCalls"),
)

FALLBACK_ANSWER = Mechanism(
    name="fallback_answer",
    hypothesis="Episodes that hit the turn limit without a tagged answer score zero; taking the last reply's "
               "first line as the answer rescues the ones that said it in plain text.",
    targets=("no_answer",),
    methods={"extract_answer": '''
def extract_answer(self, state):
    if state.final_answer is not None:
        return state.final_answer
    text = re.sub(r"<[^>]*>", " ", state.last_reply).strip()
    return text.split("\\n")[0].strip(" .!") or None
'''},
    imports=("import re",),
)

EXAMPLE_FEEDBACK = Mechanism(
    name="example_feedback",
    hypothesis="A format error message that shows a concrete, copyable reply fixes the next turn more often "
               "than an abstract instruction.",
    targets=("no_answer",),
    methods={"error_feedback": '''
def error_feedback(self, error, state):
    if state.format_errors >= 2:
        return None
    return ("Reply with exactly one line, either <search>name of the person or place</search> "
            "or <answer>short answer</answer>. For example: <search>" + state.task.inputs["question"] + "</search>")
'''},
)

FEW_SHOT_EXAMPLE = Mechanism(
    name="few_shot_example",
    hypothesis="One worked search-then-answer exchange shows the small model the tool format and the "
               "expected answer length better than the instructions do.",
    targets=("no_answer", "no_search"),
    methods={"few_shot": '''
def few_shot(self, task):
    return [
        Message("user", "Question: In which city was Anna Brel born?", kind="few_shot"),
        Message("assistant", "<search>Anna Brel</search>", kind="few_shot"),
        Message("user", "[1] Anna Brel: Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin.",
                kind="few_shot"),
        Message("assistant", "<answer>Ostin</answer>", kind="few_shot"),
    ]
'''},
    imports=("from whalekit.types import Message",),
)

MORE_TURNS = Mechanism(
    name="more_turns",
    hypothesis="Two-hop questions need two searches and an answer; three turns leave no room for one "
               "format slip, six do.",
    targets=("no_answer", "retrieval_miss"),
    attributes={"max_turns": "6"},
)

CATALOGUE: list[Mechanism] = [FORCED_FIRST_SEARCH, FEWER_DOCUMENTS, TRUNCATE_DOCUMENTS, PHASE_PREFILL, LENIENT_PARSE,
                              FALLBACK_ANSWER, EXAMPLE_FEEDBACK, FEW_SHOT_EXAMPLE, MORE_TURNS]
BY_NAME: dict[str, Mechanism] = {m.name: m for m in CATALOGUE}


# Prompt wordings: text-only edits of system_prompt and first_user_message, the search
# space of the prompt-only (FST) baseline. Every other mechanism above changes code.
PROMPT_WORDINGS: list[Mechanism] = [
    Mechanism(
        name="search_first_wording",
        hypothesis="Telling the model it cannot know the answer and must search first turns guesses into searches.",
        targets=("no_search", "no_answer"),
        methods={"system_prompt": '''
def system_prompt(self, task):
    return ("You do not know the answer to the question: it is only in the documents of a search engine. "
            "First write <search>keywords from the question</search> and stop. Then read the results and "
            "write <answer>the answer</answer>, a few words copied from a document.")
'''},
    ),
    Mechanism(
        name="short_answer_wording",
        hypothesis="Asking for the shortest answer, copied from a document, raises exact-match given a hit.",
        targets=("wrong_answer_given_hit",),
        methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return ("Question: " + task.inputs["question"] + "\\n\\nSearch with <search>query</search>. Answer with "
            "<answer>answer</answer>, using the shortest span of a document that answers the question.")
'''},
    ),
    Mechanism(
        name="entity_query_wording",
        hypothesis="Suggesting the query be the name the question is about makes BM25 find the right document.",
        targets=("retrieval_miss", "no_search"),
        methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return ("Question: " + task.inputs["question"] + "\\n\\nSearch for the name the question is about, "
            "like <search>name</search>, then answer with <answer>answer</answer>.")
'''},
    ),
]


# The cpu preset's starting harness: the authors' h0 plus the least protocol scaffolding
# SmolLM2-135M needs (under the faithful h0 it answers in prose and almost never searches:
# 0 / 512). A worked search-then-answer exchange about a person who is in no world, then
# '<search>' / '<answer>' prefills with a 32-token cap: the model still writes the query
# and the answer, and the tool is the authors' (top-1 passage, 200 tokens). Measured
# effect of each step: docs/fidelity.md.
COMPOSITIONS: list[Composition] = [
    Composition(name="h0_cpu", base="h0", mechanisms=("few_shot_example", "phase_prefill"),
                purpose="Search-QA h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared "
                        "protocol scaffolding\nfor a 135M model (a worked exchange, search/answer tag prefills)."),
]
