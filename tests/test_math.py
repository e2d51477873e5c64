"""The math domain: loaders on real formats, generated problems, math-verify checking,
the python tool, behaviour flags, h0/h1 and every mechanism of the catalogue."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from fakes.samplers import CharTokenizer, ScriptedSampler

from whalekit.domains.base import get_domain
from whalekit.domains.math import DEFAULT_MIX, MathDomain
from whalekit.domains.math.data import MathDataError, load_aime, load_dapo, load_file, load_gsm8k, question_key
from whalekit.domains.math.generator import FAMILIES, generate_problems
from whalekit.domains.math.mechanisms import BY_NAME, CATALOGUE
from whalekit.domains.math.verifier import check, last_boxed
from whalekit.domains.mechanisms import apply_mechanism
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, load_harness
from whalekit.harness import EpisodeState, FinalAnswer, ToolCalls
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.types import Task, ToolCall, ToolResult, Trajectory, Turn

FIXTURES = Path(__file__).parent / "fixtures" / "math"
DOMAIN = MathDomain()


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer()


# ---------------------------------------------------------------- loaders

def test_gsm8k_loader_takes_the_number_after_the_four_hashes():
    tasks = load_gsm8k(FIXTURES / "gsm8k.jsonl")
    assert [t.reference for t in tasks] == ["7", "2500", "1.5"]
    assert tasks[0].inputs["question"].startswith("Tom has 3 boxes") and tasks[0].subset == "gsm8k"
    assert tasks[1].meta["row"] == 2 and tasks[1].meta["file"].endswith("gsm8k.jsonl")


def test_a_malformed_row_is_reported_with_file_and_line():
    with pytest.raises(MathDataError, match=r"gsm8k_bad\.jsonl:2: answer has no '#### <number>'"):
        load_gsm8k(FIXTURES / "gsm8k_bad.jsonl")


def test_a_non_json_line_is_reported_with_its_line(tmp_path):
    bad = tmp_path / "aime.jsonl"
    bad.write_text('{"problem": "ok", "answer": "1"}\n{"problem": broken\n')
    with pytest.raises(MathDataError, match=r"aime\.jsonl:2: invalid JSON"):
        load_aime(bad)


def test_aime_loader_repairs_eaten_latex_escapes_and_a_stray_dollar_but_keeps_real_tabs():
    tasks = load_aime(FIXTURES / "aime25.jsonl")
    assert [t.subset for t in tasks] == ["aime25"] * 4
    frac, triangle, stray = tasks[1], tasks[2], tasks[3]
    assert frac.inputs["question"] == "The product $\\frac{1}{2}\\cdot\\frac{2}{3}$ is $\\frac{m}{n}$. Find $m+n$."
    assert triangle.inputs["question"].startswith("In $\\triangle ABC$")
    assert "\n\treturn x;" in triangle.inputs["question"]  # a tab in Asymptote code is real text
    assert stray.inputs["question"].endswith("divided by $1000$.")
    assert "repairs" not in tasks[0].meta and stray.meta["repairs"] == ["stray trailing '$' removed"]
    assert load_aime(FIXTURES / "aime24.jsonl")[0].subset == "aime24"


def test_dapo_loader_reads_the_verl_layout_from_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks = load_dapo(FIXTURES / "dapo.jsonl")
    assert [t.reference for t in tasks] == ["6", "1024", "6"]
    assert tasks[1].inputs["question"] == "What is $2^{10}$?"  # upstream template removed
    assert len({t.id for t in tasks}) == 3 and tasks[2].meta["repeat_of"] == tasks[0].id
    rows = [json.loads(line) for line in (FIXTURES / "dapo.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "dapo.parquet")
    from_parquet = load_dapo(tmp_path / "dapo.parquet")
    assert [(t.id, t.reference) for t in from_parquet] == [(t.id, t.reference) for t in tasks]


def test_real_aime_files_load_completely_and_every_answer_verifies_against_itself(realdata):
    for name, subset in (("aime24", "aime24"), ("aime25", "aime25")):
        tasks = load_file("aime", realdata / "aime" / name / "test.jsonl")
        assert len(tasks) == 30 and {t.subset for t in tasks} == {subset}
        assert all(re.fullmatch(r"\d{1,3}", t.reference) for t in tasks)
        assert all(check(t.reference, f"\\boxed{{{t.reference}}}").correct for t in tasks)
        assert not any(re.search("[\x00-\x08\x0b\x0c\x0e-\x1f]", t.inputs["question"]) for t in tasks)
    repaired = {t.meta["row"] for t in load_file("aime", realdata / "aime" / "aime25" / "test.jsonl")
                if "repairs" in t.meta}
    assert repaired == {5, 8, 19, 20, 28}  # SOURCES.md: 0-based rows 4, 7 (stray $), 18, 19, 27 (escapes)


@pytest.mark.slow
@pytest.mark.parametrize("source,relative,rows", [
    ("gsm8k", "gsm8k/test.jsonl", 1319),
    ("dapo", "dapo_math_17k/dapo_math_17k.parquet", 17917),
    ("dapo", "dapo_math_17k/dapo_math_17k.first500.DERIVED.jsonl", 500),
])
def test_real_gsm8k_and_dapo_load_completely_and_every_answer_verifies_against_itself(realdata, source, relative,
                                                                                      rows):
    tasks = load_file(source, realdata / relative)
    assert len(tasks) == rows and len({t.id for t in tasks}) == rows
    answers = {t.reference for t in tasks}
    assert all(check(answer, f"\\boxed{{{answer}}}").correct for answer in answers)


# ---------------------------------------------------------------- generator and splits

def test_generated_answers_are_right_and_verify():
    problems = generate_problems(150, seed=3, mix={family: 1.0 for family in FAMILIES})
    assert {p.family for p in problems} == set(FAMILIES)
    for p in problems:
        assert check(p.answer, f"So the answer is \\boxed{{{p.answer}}}.").correct, p
        expression = re.fullmatch(r"What is ([\d\s+*()-]+)\?", p.question)
        if expression:  # an independent check of the arithmetic families
            assert str(eval(expression.group(1))) == p.answer
        linear = re.fullmatch(r"Solve for x: (\d+)x ([+-]) (\d+) = (-?\d+)\.", p.question)
        if linear:
            a, sign, b, c = linear.groups()
            assert int(a) * int(p.answer) + (int(b) if sign == "+" else -int(b)) == int(c)


def test_generation_is_seeded_and_rejects_unknown_families():
    assert generate_problems(20, 1, DEFAULT_MIX) == generate_problems(20, 1, DEFAULT_MIX)
    assert generate_problems(20, 1, DEFAULT_MIX) != generate_problems(20, 2, DEFAULT_MIX)
    with pytest.raises(ValueError, match="unknown problem families"):
        MathDomain(mix={"geometry": 1.0})


def test_splits_are_disjoint_by_question_text_and_stable():
    splits = DOMAIN.load_splits(n_train=40, n_search=20, n_test=30, seed=0)
    keys = [{question_key(t.inputs["question"]) for t in part} for part in (splits.train, splits.search, splits.test)]
    assert [len(k) for k in keys] == [40, 20, 30]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    again = DOMAIN.load_splits(n_train=40, n_search=20, n_test=30, seed=0)
    assert [t.id for t in again.test] == [t.id for t in splits.test]
    assert all(t.domain == "math" and t.subset in FAMILIES for t in splits.test)


def test_real_file_splits_need_a_path_and_enough_rows():
    with pytest.raises(ValueError, match="needs path="):
        DOMAIN.load_splits(source="gsm8k")
    with pytest.raises(ValueError, match="need 4 distinct items"):
        DOMAIN.load_splits(n_train=2, n_search=1, n_test=1, source="gsm8k", path=str(FIXTURES / "gsm8k.jsonl"))
    splits = DOMAIN.load_splits(n_train=1, n_search=1, n_test=1, source="gsm8k", path=str(FIXTURES / "gsm8k.jsonl"))
    assert len(splits.train + splits.search + splits.test) == 3


# ---------------------------------------------------------------- verifier

@pytest.mark.parametrize("reference,answer", [
    ("1/2", "0.5"), ("1/2", "\\frac{1}{2}"), ("\\frac{1}{2}", "1/2"), ("1/2", "The answer is \\boxed{0.5}."),
    ("18", "She makes $18 a day, so \\boxed{18}"), ("-4", "\\boxed{-4}"), ("7", "x = 7"),
    ("2500", "\\boxed{2,500}"), ("3", "First 5, then \\boxed{3}."),
    ("81", "In mathematics, 9 * 9 is equal to 81."), ("-34", "8 - 42 gives -34"), ("1/2", "So it is 1/2."),
])
def test_math_verify_accepts_equivalent_forms(reference, answer):
    assert check(reference, answer).correct


@pytest.mark.parametrize("reference,answer", [
    ("1/2", "1/3"), ("1/2", "\\boxed{2}"), ("18", "\\boxed{81}"), ("7", "\\boxed{7} is wrong, \\boxed{8}"),
    ("7", None), ("7", ""), ("7", "no idea"), ("7", "}{\\boxed{"), ("7", "\\boxed{" * 200), ("7", "9" * 5000),
    # prose is read by its last number: a restated question is not its own answer
    ("63", "To make it more specific 31 + 32 will just be: +3."), ("121", "10.10 is equal to 11*11."),
    ("66", "you write the result involving 30 + 36."), ("81", "9 * 9 is 80, not 9 * 9."),
])
def test_wrong_answers_and_garbage_are_rejected_without_raising(reference, answer):
    verdict = check(reference, answer)
    assert not verdict.correct and verdict.reward == 0.0


def test_last_boxed_balances_braces():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("no box") is None
    assert last_boxed("cut off \\boxed{12") == "12"


# ---------------------------------------------------------------- tool, behaviour, harnesses

def test_the_registry_builds_the_domain_and_its_python_tool_runs_in_the_sandbox():
    domain = get_domain("math")
    task = domain.load_splits(n_train=1, n_search=1, n_test=1).test[0]
    result = domain.toolbox().run(ToolCall("python", {"code": "print(2**10)"}), task.view())
    assert result.ok and result.output.strip() == "1024"
    assert domain.toolbox().run(ToolCall("python", {}), task.view()).error == "bad_arguments"
    assert "python(code: str)" in domain.tools_description


def _solve_with_code(prompt: str) -> str:
    question = re.findall(r"What is ([\d\s+*()-]+)\?", prompt)[-1]
    body = f"print({question})\n```"
    return body if prompt.rstrip().endswith("```python") else f"Let me compute.\n```python\n{body}"


def _copy_output(prompt: str) -> str:
    number = re.findall(r"(?:```output|<tool_response>)\n(-?\d+)", prompt)[-1]
    return f"{number}}}" if prompt.rstrip().endswith("\\boxed{") else f"The answer is \\boxed{{{number}}}."


def _arithmetic_tasks(n: int) -> list[Task]:
    return MathDomain(mix={"arithmetic": 1.0}).load_splits(n_train=0, n_search=0, n_test=n, seed=5).test


def test_h0_runs_code_then_takes_the_boxed_answer_and_flags_the_behaviour(tokenizer):
    sampler = ScriptedSampler(tokenizer, [_solve_with_code, _copy_output])
    harness = InProcessHarness(DOMAIN.initial_harness_source())
    trajectories = rollout(DOMAIN, [Episode(t, harness, 0) for t in _arithmetic_tasks(3)], sampler,
                           RolloutConfig(progress=False))
    for trajectory in trajectories:
        assert trajectory.correct and trajectory.error is None
        assert trajectory.flags["tool_calls"] == 1 and trajectory.flags["tool_errors"] == 0
        assert trajectory.flags["boxed"] and trajectory.flags["correct"] and not trajectory.flags["truncated"]
        assert DOMAIN.failure_mode(trajectory) is None


def test_failed_code_counts_as_a_tool_error_and_names_the_failure(tokenizer):
    sampler = ScriptedSampler(tokenizer, [lambda p: "```python\nprint(1/0)\n```"])
    harness = InProcessHarness(DOMAIN.initial_harness_source())
    (trajectory,) = rollout(DOMAIN, [Episode(_arithmetic_tasks(1)[0], harness, 0)], sampler,
                            RolloutConfig(progress=False))
    assert trajectory.flags["tool_errors"] == 2 and trajectory.final_answer is None and not trajectory.correct
    assert "ZeroDivisionError" in trajectory.messages[-1].content
    assert DOMAIN.failure_mode(trajectory) == "tool_error"


def test_h0_parse_reads_code_boxed_answers_and_plain_replies():
    harness = load_harness(DOMAIN.initial_harness_source())
    state = EpisodeState(task=_arithmetic_tasks(1)[0].view())
    action = harness.parse("Sure.\n```python\nprint(3 + 4)\n```\nMore text", state)
    assert isinstance(action, ToolCalls) and action.calls[0].arguments["code"] == "print(3 + 4)\n"
    assert isinstance(harness.parse("so \\boxed{7}", state), FinalAnswer)
    assert harness.parse("The answer is 7.", state).text == "The answer is 7."
    bare = harness.parse("```python\nx = 3 + 4\nx\n```", state)
    assert bare.calls[0].arguments["code"] == "x = 3 + 4\nprint(x)\n"  # the authors' last-line print


def _drive(source: str, task, replies: list[str], outputs: list[str]):
    """One episode with scripted replies and scripted tool outputs; the finished request and
    the trajectory as the engine would record it."""
    driver = EpisodeDriver(load_harness(source), task.view())
    request, prompts, pending, results = driver.begin(), [], list(replies), list(outputs)
    trajectory = Trajectory(task.id, "math", "h", 0)
    while not isinstance(request, Finished):
        if isinstance(request, GenerateRequest):
            prompts.append(request)
            reply = pending.pop(0) if pending else "nothing"
            trajectory.turns.append(Turn([], [], reply, "eos"))
            request = driver.after_generation(reply, request.settings.prefill)
        else:
            result = [ToolResult("python", results.pop(0) if results else "") for _ in request.calls]
            trajectory.turns[-1].tool_results.extend(result)
            request = driver.after_tools(result)
    trajectory.final_answer = request.answer
    return request, prompts, trajectory


def test_h0_is_the_authors_no_system_prompt_question_plus_boxed_instruction():
    task = _arithmetic_tasks(1)[0]
    _, prompts, _ = _drive(DOMAIN.initial_harness_source(), task, ["\\boxed{1}"], [])
    system, user = prompts[0].messages
    # the only system text is the stand-in for the tool schema the authors' chat template renders
    assert system.content.startswith("Tool: code_interpreter(code)") and "boxed" not in system.content
    instruction = "\nThe answer format must be: \\boxed{'The final answer goes here.'}"
    assert user.content == task.inputs["question"] + instruction


def test_h0_ends_at_the_first_turn_without_a_tool_call_and_reads_only_a_boxed_answer():
    task = _arithmetic_tasks(1)[0]
    h0 = DOMAIN.initial_harness_source()
    finished, prompts, _ = _drive(h0, task, ["The answer is 7.", "\\boxed{7}"], [])
    assert len(prompts) == 1 and finished.answer is None  # no retry, no last-number fallback
    finished, prompts, _ = _drive(h0, task, ["```python\nprint(3+4)\n```", "So \\boxed{7}."], ["7\n"])
    assert len(prompts) == 2 and finished.answer == "\\boxed{7}"
    assert prompts[1].messages[-1].content == "<tool_response>\n7\n\n</tool_response>"


def test_h0_stops_after_two_turns_even_mid_tool_use():
    task = _arithmetic_tasks(1)[0]
    code = "```python\nprint(1)\n```"
    finished, prompts, trajectory = _drive(DOMAIN.initial_harness_source(), task, [code, code, code], ["1", "1"])
    assert len(prompts) == 2 and finished.answer is None
    assert sum(len(t.tool_results) for t in trajectory.turns) == 2


def test_h1_prefills_code_then_the_boxed_answer(tokenizer):
    sampler = ScriptedSampler(tokenizer, [_solve_with_code, _copy_output])
    tasks = _arithmetic_tasks(2)
    trajectories = rollout(DOMAIN, [Episode(t, InProcessHarness(DOMAIN.harness_source("h1")), 0) for t in tasks],
                           sampler, RolloutConfig(progress=False))
    assert all(t.correct for t in trajectories)
    assert [turn.prefill for turn in trajectories[0].turns] == ["```python\n", "The answer is \\boxed{"]


# ---------------------------------------------------------------- mechanisms

def test_the_catalogue_has_6_to_10_named_mechanisms_aimed_at_declared_failure_modes():
    assert 6 <= len(CATALOGUE) <= 10 and len(BY_NAME) == len(CATALOGUE)
    assert DOMAIN.mechanisms() == CATALOGUE
    for mechanism in CATALOGUE:
        assert mechanism.hypothesis and set(mechanism.targets) <= set(DOMAIN.failure_modes), mechanism.name


@pytest.mark.parametrize("mechanism", CATALOGUE, ids=lambda m: m.name)
def test_every_mechanism_applies_to_h0_loads_and_solves_scripted_episodes(mechanism, tokenizer):
    source = apply_mechanism(DOMAIN.initial_harness_source(), mechanism)
    assert source != DOMAIN.initial_harness_source()
    harness = InProcessHarness(source)
    sampler = ScriptedSampler(tokenizer, [_solve_with_code, _copy_output])
    trajectories = rollout(DOMAIN, [Episode(t, harness, 0) for t in _arithmetic_tasks(2)], sampler,
                           RolloutConfig(progress=False))
    assert all(t.error is None and t.correct for t in trajectories), [t.error for t in trajectories]


def test_mechanisms_on_different_hooks_compose():
    for first, second in itertools.combinations(CATALOGUE, 2):
        if first.hooks() & second.hooks():
            continue
        source = apply_mechanism(apply_mechanism(DOMAIN.initial_harness_source(), first), second)
        load_harness(source)


# ---------------------------------------------------------------- the real model

@pytest.mark.slow
def test_h0_with_smollm2_end_to_end(smollm_policy):
    tasks = DOMAIN.load_splits(n_train=0, n_search=0, n_test=4, seed=0).test
    harness = InProcessHarness(DOMAIN.initial_harness_source())
    trajectories = rollout(DOMAIN, [Episode(t, harness, i) for t in tasks for i in range(2)], smollm_policy.sampler,
                           RolloutConfig(seed=0, progress=False))
    assert len(trajectories) == 8
    for trajectory in trajectories:
        assert trajectory.turns and "wall_s" in trajectory.timings
        assert {"boxed", "truncated", "tool_calls", "tool_errors", "correct"} <= set(trajectory.flags)
        assert trajectory.flags["correct"] == trajectory.correct
        assert DOMAIN.failure_mode(trajectory) in (None, *DOMAIN.failure_modes)
