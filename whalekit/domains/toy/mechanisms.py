"""Harness mechanisms for the toy arithmetic domain: the levers a reflective proposer
pulls when a small model fumbles "What is 17 + 5?" (answer format, prefill, few-shot
examples, parsing leniency, retries, a forced calculator call).

Why a toy catalogue: the search loop and the reflective proposer are tested on this
domain with the tiny random model, so it must exercise every kind of edit (methods,
attributes, imports, module helpers) the real domains' catalogues use.

    from whalekit.domains.toy.mechanisms import CATALOGUE
    source = apply_mechanism(h0_source, CATALOGUE[0])
"""

from whalekit.domains.mechanisms import Mechanism

# The audit (docs/reproduction-v3.md): the failure modes each hook a mechanism may edit decides
# directly; a text hook decides none by itself (tests/test_mechanism_audit.py).
HOOK_FAILURE_MODES: dict[str, tuple[str, ...]] = {
    "generation_settings": ("no_answer",),
    "few_shot": ("no_answer",),
    "parse": ("wrong_answer",),
    "initial_tool_calls": ("wrong_answer",),
    "error_feedback": ("no_answer",),
    "max_turns": ("no_answer",),
    "system_prompt": (),
    "first_user_message": (),
}

CATALOGUE: list[Mechanism] = [
    Mechanism(
        name="prefill_answer",
        hypothesis="Starting the reply with 'The answer is' makes a small model emit a number at once.",
        targets=("no_answer",),
        methods={"generation_settings": '''
def generation_settings(self, state):
    return GenerationSettings(max_new_tokens=8, stop=["\\n", "."], prefill="The answer is ")
'''},
    ),
    Mechanism(
        name="few_shot_examples",
        hypothesis="Two worked exchanges show the exact reply format, so fewer replies lack a number.",
        targets=("no_answer", "wrong_answer"),
        methods={"few_shot": '''
def few_shot(self, task):
    return [Message("user", "What is 2 + 3?", kind="few_shot"), Message("assistant", "5", kind="few_shot"),
            Message("user", "What is 10 + 4?", kind="few_shot"), Message("assistant", "14", kind="few_shot")]
'''},
        imports=("from whalekit.types import Message",),
    ),
    Mechanism(
        name="lenient_first_number",
        hypothesis="Small models often restate the answer then ramble; the first number is the answer more often.",
        targets=("wrong_answer",),
        methods={"parse": '''
def parse(self, reply, state):
    numbers = re.findall(r"-?\\d+", reply)
    return FinalAnswer(numbers[0]) if numbers else FormatError("no number in the reply")
'''},
        imports=("import re",),
    ),
    Mechanism(
        name="calculator_first",
        hypothesis="Running the calculator on the question before the model speaks and showing the result "
                   "turns arithmetic into copying, which even a tiny model can do.",
        targets=("wrong_answer", "no_answer"),
        methods={
            "initial_tool_calls": '''
def initial_tool_calls(self, task):
    expression = question_expression(task.inputs["question"])
    return [ToolCall("calculator", {"expression": expression})] if expression else []
''',
            "first_user_message": '''
def first_user_message(self, task, initial_results):
    hint = "".join(f"\\nCalculator result: {r.output}" for r in initial_results if r.ok)
    return task.inputs["question"] + hint
''',
        },
        imports=("from whalekit.types import ToolCall",),
        module_code='''
def question_expression(question):
    match = re.search(r"(-?\\d+\\s*[-+*]\\s*-?\\d+)", question)
    return match.group(1) if match else None
''',
    ),
    Mechanism(
        name="retry_on_format_error",
        hypothesis="One more turn with a short correction rescues replies that had no number.",
        targets=("no_answer",),
        attributes={"max_turns": "2"},
        methods={"error_feedback": '''
def error_feedback(self, error, state):
    return "Reply with one integer only, for example: 42"
'''},
    ),
    Mechanism(
        name="terse_system_prompt",
        hypothesis="A shorter, more literal instruction is easier for a 135M model to follow.",
        targets=("wrong_answer", "no_answer"),
        methods={"system_prompt": '''
def system_prompt(self, task):
    return "Add the numbers. Answer with digits only."
'''},
    ),
]
