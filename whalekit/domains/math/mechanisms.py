"""The math domain's catalogue of harness mechanisms: named edits of h0 aimed at what
goes wrong with a small model here (replies that ramble into the token cap, code never
written or never printed, tracebacks the model cannot read, answers never boxed).

Most set one of h0's lever attributes, so they compose freely; the others replace one
hook each. Two mechanisms conflict only when they replace the same hook
(`lenient_code_blocks` and `strict_boxed_answer` both replace `parse`).

    from whalekit.domains.mechanisms import apply_mechanism
    source = apply_mechanism(h0_source, BY_NAME["code_prefill"])
"""

from __future__ import annotations

from whalekit.domains.mechanisms import Composition, Mechanism

# The audit (docs/reproduction-v3.md): the failure modes each hook a mechanism may edit decides
# directly. A mechanism's targets plus its `alters` cover those of its hooks
# (tests/test_mechanism_audit.py); a text hook (prompts, wordings) decides none by itself.
HOOK_FAILURE_MODES: dict[str, tuple[str, ...]] = {
    "first_prefill": ("no_answer", "tool_error"),  # a prefilled code block runs: its errors are tool errors
    "answer_prefill": ("unparsable_answer",),
    "few_shot": ("no_answer",),
    "max_new_tokens": ("truncated",),
    "max_turns": ("no_answer",),
    "parse": ("no_answer",),
    "error_feedback": ("no_answer",),
    "format_tool_result": ("tool_error",),
    "extract_answer": ("no_answer", "unparsable_answer"),
    "manage_context": ("truncated",),
    "system_prompt": (),
    "first_user_message": (),
}

CODE_PREFILL = Mechanism(
    name="code_prefill",
    hypothesis="Opening the first reply with a ```python fence makes the model write code instead of prose.",
    targets=("no_answer", "wrong_answer", "truncated"),
    alters=("tool_error",),  # the prefilled code runs: its errors are tool errors
    attributes={"first_prefill": repr("```python\n")},
)

BOXED_PREFILL_AFTER_OUTPUT = Mechanism(
    name="boxed_prefill_after_output",
    hypothesis="After the tool output, starting the reply with 'The answer is \\boxed{' turns it into a copy task.",
    targets=("no_answer", "unparsable_answer", "wrong_answer"),
    attributes={"answer_prefill": repr("The answer is \\boxed{")},
)

FEW_SHOT_WORKED_EXAMPLE = Mechanism(
    name="few_shot_worked_example",
    hypothesis="One worked exchange (question, code, output, boxed answer) shows the whole protocol.",
    targets=("no_answer", "unparsable_answer", "tool_error", "wrong_answer"),
    imports=("from whalekit.types import Message",),
    methods={"few_shot": '''
def few_shot(self, task):
    return [
        Message("user", "What is 12 * 7 + 5?", kind="few_shot"),
        Message("assistant", "```python\\nprint(12 * 7 + 5)\\n```", kind="few_shot"),
        Message("user", "<tool_response>\\n89\\n</tool_response>", kind="few_shot"),
        Message("assistant", "The answer is \\\\boxed{89}.", kind="few_shot"),
    ]
'''},
)

SHORT_REPLIES = Mechanism(
    name="short_replies",
    hypothesis="A 96-token cap stops rambling replies early and leaves turns for the tool output and the answer.",
    targets=("truncated",),
    attributes={"max_new_tokens": "96"},
)

MORE_TURNS = Mechanism(
    name="more_turns",
    hypothesis="Five turns instead of two leave room to fix failing code before the episode ends.",
    targets=("no_answer", "tool_error"),
    attributes={"max_turns": "5"},
)

LENIENT_CODE_BLOCKS = Mechanism(
    name="lenient_code_blocks",
    hypothesis="Accepting unlabelled fences and bare print(...) lines as code runs what the model meant to run.",
    targets=("no_answer", "wrong_answer"),
    imports=("import re",),
    module_code='''
LENIENT_CODE = re.compile(r"```[a-zA-Z]*[ \\t]*\\n(.*?)(?:```|$)", re.S)
PRINT_LINE = re.compile(r"^\\s*(print\\(.*\\))\\s*$", re.M)
''',
    methods={"parse": '''
def parse(self, reply, state):
    if "\\\\boxed" in reply:
        return FinalAnswer(reply if reply.count("{") <= reply.count("}") else reply + "}")
    code = LENIENT_CODE.search(reply)
    if code and code.group(1).strip():
        return ToolCalls([ToolCall("python", {"code": code.group(1)})])
    prints = PRINT_LINE.findall(reply)
    if prints and state.tool_calls == 0:
        return ToolCalls([ToolCall("python", {"code": "\\n".join(prints)})])
    return FinalAnswer(reply)
'''},
)

STRICT_BOXED_ANSWER = Mechanism(
    name="strict_boxed_answer",
    hypothesis="Refusing replies without code or \\boxed{} (with feedback) makes the answer explicit.",
    targets=("unparsable_answer", "wrong_answer"),
    alters=("no_answer",),  # a stricter parse turns loose answers into format errors
    imports=("from whalekit.harness import FormatError",),
    methods={"parse": '''
def parse(self, reply, state):
    if "\\\\boxed" in reply:
        return FinalAnswer(reply if reply.count("{") <= reply.count("}") else reply + "}")
    code = CODE_BLOCK.search(reply)
    if code and code.group(1).strip():
        return ToolCalls([ToolCall("python", {"code": code.group(1)})])
    return FormatError("write a ```python block, or give the final answer as \\\\boxed{answer}")
''', "error_feedback": '''
def error_feedback(self, error, state):
    return "Please " + error.message + "."
'''},
)

ERROR_LAST_LINE = Mechanism(
    name="error_last_line",
    hypothesis="The last traceback line plus a hint is readable for a small model; a full traceback is not.",
    targets=("tool_error",),
    methods={"format_tool_result": '''
def format_tool_result(self, result, state):
    text = result.output.strip()
    if result.ok:
        shown = text[-self.output_chars:] if text else "(nothing printed: use print())"
        return "<tool_response>\\n" + shown + "\\n</tool_response>\\nGive the final answer as \\\\boxed{answer}."
    last = text.splitlines()[-1] if text else str(result.error)
    return ("<tool_response>\\nError: " + last[-300:] + "\\n</tool_response>\\nFix the code, or give the final "
            "answer as \\\\boxed{answer}.")
'''},
)

ANSWER_FROM_LAST_OUTPUT = Mechanism(
    name="answer_from_last_output",
    hypothesis="When the turns run out after a tool call, the last printed number is a better answer than none.",
    targets=("no_answer", "tool_error", "truncated"),
    alters=("unparsable_answer",),  # what it extracts decides whether the answer parses
    imports=("import re",),
    methods={"extract_answer": '''
def extract_answer(self, state):
    if state.final_answer is not None:
        return state.final_answer
    for message in reversed(state.messages):
        if message.kind == "tool_result":
            numbers = re.findall(r"-?\\d+(?:\\.\\d+)?(?:/\\d+)?", message.content)
            return numbers[-1] if numbers else None
    return None
'''},
)

RECENT_CONTEXT = Mechanism(
    name="recent_context",
    hypothesis="Keeping only the question and the last exchange keeps prompts short and on the latest output.",
    targets=("truncated", "wrong_answer"),
    methods={"manage_context": '''
def manage_context(self, messages, state):
    head = []
    for message in messages:  # system prompt, examples and the question stay
        head.append(message)
        if message.role == "user" and message.kind == "text":
            break
    return head + messages[len(head):][-2:]
'''},
)

CATALOGUE: list[Mechanism] = [
    CODE_PREFILL, BOXED_PREFILL_AFTER_OUTPUT, FEW_SHOT_WORKED_EXAMPLE, SHORT_REPLIES, MORE_TURNS,
    LENIENT_CODE_BLOCKS, STRICT_BOXED_ANSWER, ERROR_LAST_LINE, ANSWER_FROM_LAST_OUTPUT, RECENT_CONTEXT,
]
BY_NAME = {m.name: m for m in CATALOGUE}


# Prompt wordings: text-only edits of system_prompt and first_user_message, the search
# space of the prompt-only (FST) baseline. Every other mechanism above changes code.
PROMPT_WORDINGS: list[Mechanism] = [
    Mechanism(
        name="compute_then_box",
        hypothesis="Spelling out the two steps (one short program that prints the answer, then \\boxed{} with it) "
                   "keeps replies short enough not to hit the token cap.",
        targets=("truncated", "unparsable_answer"),
        methods={"system_prompt": '''
def system_prompt(self, task):
    return ("Solve the problem in two steps. First write one short ```python block that computes the answer "
            "and prints it. After you see the output, reply with only \\\\boxed{answer}.")
'''},
    ),
    Mechanism(
        name="question_with_reminder",
        hypothesis="Repeating the answer format right after the question, where a small model looks last, "
                   "raises the share of boxed answers.",
        targets=("unparsable_answer", "wrong_answer"),
        methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return (task.inputs["question"] + "\\n\\nUse Python if it helps. Give the final answer as "
            "\\\\boxed{number}.")
'''},
    ),
    Mechanism(
        name="terse_assistant",
        hypothesis="A brief, literal system prompt leaves more of the token budget for the computation.",
        targets=("truncated",),
        methods={"system_prompt": '''
def system_prompt(self, task):
    return ("Answer math questions. You may run Python in a ```python block. Be brief. "
            "End with \\\\boxed{answer}.")
'''},
    ),
]


# The cpu preset's starting harness: the authors' h0 plus the least protocol scaffolding
# SmolLM2-135M needs to answer in the asked form (it scores 0 / 512 under the faithful h0,
# boxing the instruction's placeholder). A worked exchange on a problem in no split, then a
# reply opened with "The answer is \\boxed{" after a tool output: the model still writes
# the code and the number. Measured effect of each step: docs/fidelity.md.
COMPOSITIONS: list[Composition] = [
    Composition(name="h0_cpu", base="h0", mechanisms=("few_shot_worked_example", "boxed_prefill_after_output"),
                purpose="Math h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol "
                        "scaffolding\nfor a 135M model (a worked exchange, a boxed-answer prefill after a tool "
                        "output)."),
]
