"""The cpu preset's starting point: each domain's `h0_cpu` is the authors' h0 plus declared
catalogue mechanisms of protocol scaffolding (nothing that does the task), the file equals
that composition, the cpu preset starts every method from it, and the authors' h0 stays one
flag away (`--set initial_harness=h0_faithful`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whalekit.domains.base import get_domain
from whalekit.domains.mechanisms import Composition, apply_mechanism, compose, composed_source
from whalekit.episode import load_harness
from whalekit.report.stats import acceptance_power
from whalekit.repro.calibration import code_hash
from whalekit.run.driver import resolve_config
from whalekit.types import ToolResult

DOMAINS = ("chess", "math", "searchqa")

# What a cpu-scale h0 may add to the authors' h0 (issue 27): a format demonstration on a
# problem in no split, answer/format prefills or a constrained answer format, a tolerant
# answer parser, a shorter token cap. Every mechanism of an h0_cpu must be one of these,
# named here with its kind, so adding a task-solving mechanism fails this test.
SCAFFOLDING = {
    "math": {"few_shot_worked_example": "format demonstration", "code_prefill": "format prefill",
             "boxed_prefill_after_output": "answer prefill", "short_replies": "token cap"},
    "searchqa": {"few_shot_example": "format demonstration", "phase_prefill": "format prefill",
                 "lenient_parse": "tolerant parser"},
    "chess": {"few_shot_format": "format demonstration", "move_tag_prefill": "format prefill",
              "legal_move_choice": "constrained answer format", "lenient_parser": "tolerant parser"},
}


def _h0_cpu(domain_name: str) -> Composition:
    found = [c for c in get_domain(domain_name).compositions() if c.name == "h0_cpu"]
    assert len(found) == 1, f"{domain_name} declares no h0_cpu composition"
    return found[0]


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_h0_cpu_is_the_authors_h0_plus_its_declared_mechanisms_exactly(domain_name):
    domain = get_domain(domain_name)
    composition = _h0_cpu(domain_name)
    assert composition.base == "h0"
    shipped = domain.harness_source("h0_cpu")
    assert shipped == composed_source(domain, composition), \
        "harnesses/h0_cpu.py differs from its composition: regenerate with `python -m whalekit.search.compositions`"
    catalogue = {m.name: m for m in domain.mechanisms()}
    by_hand = domain.harness_source("h0")
    for name in composition.mechanisms:
        by_hand = apply_mechanism(by_hand, catalogue[name])
    assert shipped.split('"""', 2)[2] == by_hand.split('"""', 2)[2]  # the same code below the docstring


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_h0_cpu_adds_only_protocol_scaffolding(domain_name):
    mechanisms = _h0_cpu(domain_name).mechanisms
    assert mechanisms, "an h0_cpu with no scaffolding is the authors' h0"
    unknown = [m for m in mechanisms if m not in SCAFFOLDING[domain_name]]
    assert not unknown, f"{domain_name} h0_cpu uses mechanisms not declared as scaffolding: {unknown}"


def test_a_format_demonstration_is_on_no_problem_of_any_split():
    math = get_domain("math")
    splits = math.load_splits(n_train=80, n_search=48, n_test=64, seed=0)
    questions = {t.inputs["question"] for split in (splits.train, splits.search, splits.test) for t in split}
    assert "What is 12 * 7 + 5?" not in questions
    searchqa = get_domain("searchqa")
    example = searchqa.harness_source("h0_cpu")
    world = searchqa.world
    assert not [p.name for p in world.people if p.name in example], "the demonstration names a person of the world"
    assert not [c for c in world.cities if getattr(c, "name", c) in example]


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_every_composed_harness_file_equals_its_composition(domain_name):
    domain = get_domain(domain_name)
    for composition in domain.compositions():
        assert domain.harness_source(composition.name) == composed_source(domain, composition), \
            f"harnesses/{composition.name}.py differs from its composition: regenerate with " \
            "`python -m whalekit.search.compositions`"


def test_chess_h1_is_h0_plus_three_catalogue_mechanisms_under_its_own_name():
    chess = get_domain("chess")
    h1 = next(c for c in chess.compositions() if c.name == "h1")
    assert (h1.base, h1.mechanisms) == ("h0", ("compact_legal_moves", "legal_move_choice", "compact_history"))
    harness = load_harness(chess.harness_source("h1"))
    assert (type(harness).__name__, harness.name) == ("ChessH1", "chess-h1")


# Math and Search-QA h1 are hand-written, not compositions: each differs from h0 in hooks no
# catalogue mechanism sets (math: system prompt, bare question, 3 turns, parse, ```output tool
# results, last-number fallback; Search-QA: one turn, "Document i:" blocks cut to 300
# characters), so making either a composition would change the harness its calibrated
# figure (results/calibration/cpu/) measures. Their few-shot examples drift from the catalogue
# mechanisms in exactly the ways below; a change to either side fails here.
def _few_shot(source: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in load_harness(source).few_shot(None)]


def test_math_h1_few_shot_is_the_mechanisms_but_its_tool_turn_is_rendered_as_h1_renders_tool_results():
    math = get_domain("math")
    mechanism = {m.name: m for m in math.mechanisms()}["few_shot_worked_example"]
    h1, h0 = math.harness_source("h1"), math.harness_source("h0")
    h1_example, mechanism_example = _few_shot(h1), _few_shot(apply_mechanism(h0, mechanism))
    assert [m for i, m in enumerate(h1_example) if i != 2] == [m for i, m in enumerate(mechanism_example) if i != 2]
    assert h1_example[2] == ("user", "```output\n89\n```")  # h1's tool-result format
    assert mechanism_example[2] == ("user", "<tool_response>\n89\n</tool_response>")  # h0's
    assert h1_example[2][1] == load_harness(h1).format_tool_result(ToolResult("python", "89\n"), None)
    assert mechanism_example[2][1] == load_harness(h0).format_tool_result(ToolResult("python", "89"), None)


def test_searchqa_h1_few_shot_is_the_mechanisms_exchange_without_the_search_turn():
    searchqa = get_domain("searchqa")
    mechanism = {m.name: m for m in searchqa.mechanisms()}["few_shot_example"]
    h1_example = _few_shot(searchqa.harness_source("h1"))
    mechanism_example = _few_shot(apply_mechanism(searchqa.harness_source("h0"), mechanism))
    passage = "Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin."
    assert mechanism_example == [
        ("user", "Question: In which city was Anna Brel born?"), ("assistant", "<search>Anna Brel</search>"),
        ("user", f"[1] Anna Brel: {passage}"), ("assistant", "<answer>Ostin</answer>")]
    # h1 searches before the model speaks: one turn, the documents (a second one added) before the question
    assert h1_example == [
        ("user", f"Document 1: {passage}\nDocument 2: Ostin is a city in Valmar, on the cold Dree river.\n\n"
                 "Question: In which city was Anna Brel born?"),
        ("assistant", "<answer>Ostin</answer>")]


def test_compose_replaces_the_docstring_and_keeps_the_code():
    source = '"""old"""\nfrom whalekit.harness import Harness\n\n\nclass H(Harness):\n    max_turns = 2\n'
    composed = compose(source, [], "new purpose")
    assert composed.startswith('"""new purpose"""') and "old" not in composed and "max_turns = 2" in composed


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_the_cpu_preset_starts_from_h0_cpu_and_the_authors_h0_is_one_flag_away(domain_name):
    cpu = resolve_config("cpu", domain=domain_name, method="whale")
    assert cpu.initial_harness == "h0_cpu"
    assert cpu.run_name == "whale-1,2-s0"
    zero_start = resolve_config("cpu", domain=domain_name, method="weight_only", initial_harness="h0_faithful")
    assert zero_start.run_name == "weight_only-s0-h0_faithful", "zero-start runs must not overwrite the preset's"
    domain = get_domain(domain_name)
    assert domain.initial_harness_source("h0_faithful") == domain.harness_source("h0")


def test_an_unknown_initial_harness_names_the_shipped_ones():
    with pytest.raises(ValueError, match="h0_cpu"):
        get_domain("math").initial_harness_source("h0_typo")


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_every_mechanism_of_h0_cpu_has_its_row_in_the_fidelity_table_as_a_cpu_departure(domain_name):
    table = (Path(__file__).resolve().parents[1] / "docs" / "fidelity.md").read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith(f"| h0_cpu, {domain_name}")]
    for mechanism in _h0_cpu(domain_name).mechanisms:
        row = [r for r in rows if f"`{mechanism}`" in r]
        assert len(row) == 1, f"docs/fidelity.md needs one '| h0_cpu, {domain_name} ...' row for `{mechanism}`"
        assert "cpu departure" in row[0] and "mean@8" in row[0], "the row says it departs and what it measured"


# The committed calibration records (bench/calibrate_<domain>.py --preset cpu --json ...), made
# with SmolLM2-135M (Q4_1 GGUF, dequantised) on the preset's sampler at T 1 / top_k 20, 64 test
# problems x 8 samples. A record whose h0_cpu code or data differs from today's is stale: the test
# fails, so a changed starting point must be recalibrated.
RECORDS = Path(__file__).resolve().parents[1] / "results" / "calibration" / "cpu"


def _record(domain_name: str) -> dict:
    return json.loads((RECORDS / f"{domain_name}.json").read_text())


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_the_calibration_record_is_of_todays_h0_cpu_and_data_at_64_by_8(domain_name):
    record = _record(domain_name)
    config = resolve_config("cpu", domain=domain_name, method="whale")
    assert (record["split"], record["problems"], record["samples"]) == ("test", 64, 8)
    assert (record["temperature"], record["top_k"], record["initial_harness"]) == (1.0, 20, "h0_cpu")
    assert record["domain_options"] == config.domain_options and record["split_options"] == config.split_options
    h0_cpu = get_domain(domain_name, **config.domain_options).harness_source("h0_cpu")
    assert record["harnesses"]["h0"]["code_sha256"] == code_hash(h0_cpu), \
        f"h0_cpu changed since it was calibrated: rerun `{record['command']}`"


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_h0_cpu_scores_between_5_and_35_percent_and_the_search_split_has_power_there(domain_name):
    level = _record(domain_name)["harnesses"]["h0"]["mean_at_k"]
    assert 0.05 <= level <= 0.35, (domain_name, level)
    n_search = resolve_config("cpu", domain=domain_name, method="whale").n_search
    assert acceptance_power(level, 0.10, n_search) >= 0.8


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_a_calibrated_h1_is_todays_h1(domain_name):
    record = _record(domain_name)
    if "h1" not in record["harnesses"]:
        pytest.skip(f"{domain_name}: no h1 in the calibration record")
    h1 = get_domain(domain_name, **record["domain_options"]).harness_source("h1")
    assert record["harnesses"]["h1"]["code_sha256"] == code_hash(h1), \
        f"h1 changed since it was calibrated: rerun `{record['command']}`"


def test_the_catalogues_h1_is_at_least_10_points_above_h0_cpu_in_two_domains():
    gaps = {d: _record(d)["harnesses"]["h1"]["mean_at_k"] - _record(d)["harnesses"]["h0"]["mean_at_k"]
            for d in DOMAINS if "h1" in _record(d)["harnesses"]}
    assert sum(gap >= 0.10 for gap in gaps.values()) >= 2, gaps


def test_the_chess_random_legal_floor_lies_between_3_and_15_percent():
    floor = _record("chess")["random_legal_move"]
    assert 0.03 <= floor["expected"] <= 0.15 and 0.03 <= floor["mean@k"] <= 0.15, floor
