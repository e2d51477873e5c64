"""The trace viewer shows what happened (conversation, tool calls, verdict, flags), marks
exactly the tokens RSFT trains on, shows special tokens as markers and whole characters,
diffs normalised sources of a candidate and its parent, opens on the most informative run,
harness and example, never shows a stale view after a pick, and falls back to static HTML
where no widget front end exists."""

from __future__ import annotations

import dataclasses

import pytest
from run_fixtures import trajectory, write_run

from whalekit.infra.runs import NoRunsError
from whalekit.report import viewer, widgets
from whalekit.repro.reproduce_plan import preset_with_runs
from whalekit.search.archive import Archive
from whalekit.types import Turn
from whalekit.weights.rsft_loss import training_sequences


def test_only_completions_of_accepted_trajectories_are_marked_trained():
    accepted = trajectory(correct=True)
    assert widgets.trained_turns(accepted) == [True, True]
    assert widgets.trained_turns(trajectory(correct=False)) == [False, False]
    assert widgets.trained_turns(trajectory(correct=False), accepted=True) == [True, True]
    # the same length rule as RSFT: the first turn (3 + 2 ids) fits in 5, the second (6 + 3) does not
    assert widgets.trained_turns(accepted, max_seq_len=5) == [True, False]
    assert len(training_sequences(accepted, 5)[0]) == 1


def test_trajectory_html_shows_conversation_tools_verdict_flags_and_trained_tokens():
    page = widgets.trajectory_html(trajectory(correct=True, prefill="{"))
    for expected in ("What is 1 + 2?", "calculator", "{&#x27;expression&#x27;: &#x27;1+2&#x27;}", "tool_result",
                     "verdict: <b style='color:#1B7F1B'>correct</b>", "format_valid=True", "turns=2",
                     "5 generated tokens</span> of 5", "Answer: 3"):
        assert expected in page, expected
    # the prefill is shown apart from the trained completion (it was part of the prompt)
    assert "<span class='wk-prefill' title='prefill: part of the prompt'>{</span>" in page
    wrong = widgets.trajectory_html(trajectory(correct=False))
    assert "wrong" in wrong and "0 generated tokens</span> of 5" in wrong


def test_a_tokenizer_splits_the_completion_into_token_spans():
    class Tokenizer:
        def decode(self, ids):
            return f"<t{ids[0]}>"

    page = widgets.trajectory_html(trajectory(), tokenizer=Tokenizer())
    assert page.count("class='wk-tok'") == 5 and "&lt;t13&gt;" in page


class ByteTokenizer:
    """Byte-level, as SmolLM2's: one token per UTF-8 byte (ids 0-255), 300 = <|im_end|>."""

    all_special_ids = [300]

    def decode(self, ids):
        return "".join("<|im_end|>" if i == 300 else "" for i in ids if i == 300) or \
            bytes(ids).decode("utf-8", errors="replace")


def test_token_pieces_are_whole_characters_and_special_tokens_stand_apart():
    text = "é 世🙂"
    ids = list(text.encode()) + [300]
    pieces = widgets.token_pieces(ByteTokenizer(), ids)
    assert [p[1] for p in pieces] == ["é", " ", "世", "🙂", "<|im_end|>"]
    assert [p[2] for p in pieces] == [False, False, False, False, True]
    assert [len(p[0]) for p in pieces] == [2, 1, 3, 4, 1]  # every id shown exactly once


def test_special_tokens_show_as_markers_not_inside_the_assistant_text():
    turn = Turn([1], list(b"Answer: 3") + [300], "Answer: 3", "eos")
    page = widgets.trajectory_html(dataclasses.replace(trajectory(), turns=[turn]), tokenizer=ByteTokenizer())
    assert "&lt;|im_end|&gt;<" not in page and "class='wk-special'" in page and ">im_end</span>" in page
    # text without a tokenizer (a message, a tool result) gets the same markers
    assert widgets.text_html("done<|im_end|>") == "done" + widgets.special_marker("<|im_end|>")
    assert "\ufffd" not in widgets.trajectory_html(dataclasses.replace(trajectory(), turns=[
        Turn([1], list("é".encode()), "é", "eos")]), tokenizer=ByteTokenizer())


def test_the_real_tokenizer_decodes_whole_characters(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    text = "Größe: 3 € — 世界 🙂"
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    pieces = widgets.token_pieces(tokenizer, ids)
    assert "".join(p[1] for p in pieces if not p[2]) == text
    assert not any("\ufffd" in p[1] for p in pieces) and pieces[-1] == ([ids[-1]], "<|im_end|>", True)


def test_html_escapes_model_output():
    evil = trajectory()
    evil = dataclasses.replace(evil, final_answer="<script>alert(1)</script>")
    assert "<script>" not in widgets.trajectory_html(evil)


def test_candidate_diff_is_side_by_side_against_its_parent(tmp_path):
    run = write_run(tmp_path, "whale", [0.5, 0.75])
    archive = Archive.open(run.root / "archive", "toy")
    child = [e for e in archive.entries() if e.hypothesis == "prefill helps"][0]
    page = widgets.candidate_diff_html(archive, child.id)
    assert "prefill helps" in page and archive.seed_id() in page
    assert page.count("<td nowrap=\"nowrap\">") >= 2  # two columns: parent | candidate
    assert "prefill&nbsp;=&nbsp;&#x27;Answer:&#x27;" in page or "prefill&nbsp;=&nbsp;'Answer:'" in page
    assert "class='wk-diff'" in page  # its own scrolling box, left-aligned against JupyterLab's table style
    assert ".wk-diff{overflow:auto" in page and "text-align:left !important" in page


def test_diffs_compare_normalised_sources_so_only_real_changes_show():
    before = 'class H:\n    prompt = "Solve it."\n\n\n    def f(self):  # why\n        return (1,\n                2)\n'
    restyled = "class H:\n    prompt = 'Solve it.'\n    def f(self):\n        return (1, 2)\n"
    assert "no change (after normalisation)" in widgets.diff_html(before, restyled)
    changed = widgets.diff_html(before, restyled.replace("Solve it.", "Think, then solve it."))
    assert "Think," in changed and changed.count("class=\"diff_chg\"") + changed.count("class=\"diff_add\"") >= 1
    assert "#&nbsp;why" not in changed  # comments are not part of the normalised source
    assert "no change" not in widgets.diff_html(before, restyled, normalise=False)


def test_browse_degrades_to_static_html_without_widgets(tmp_path, monkeypatch):
    write_run(tmp_path, "whale", [0.5, 0.75])
    shown: list[str] = []
    monkeypatch.setattr(widgets, "show_html", shown.append)
    assert widgets.widgets_available() is False  # plain pytest: no kernel, no front end
    monkeypatch.setenv(widgets.HEADLESS_ENV, "1")
    viewer.browse(tmp_path, "smoke")
    assert len(shown) == 1
    assert "prefill helps" in shown[0]  # the accepted candidate's diff against h0
    assert shown[0].count("class='wk-trace'") >= 3  # diff + two example trajectories


def test_run_sources_list_test_evaluations_and_scored_candidates(tmp_path):
    run = write_run(tmp_path, "whale", [0.5, 0.75])
    sources = viewer.run_sources(run.root)
    assert [name for name in sources if name.startswith("test ")] == ["test eval-000", "test eval-001"]
    assert sum(1 for name in sources if name.endswith("@ w0")) == 2  # seed and the scored child


def test_the_viewer_opens_on_a_whale_run_its_accepted_harness_and_a_correct_tool_call(tmp_path):
    pytest.importorskip("ipywidgets")
    write_run(tmp_path, "weight_only", [0.5, 0.75])  # alphabetically first, less informative
    whale = write_run(tmp_path, "whale", [0.5, 0.75])
    view = viewer.browse(tmp_path, "smoke", interactive=True)
    accepted = viewer.accepted_harness(whale.root)
    assert view.run == whale.root and view.run_box.value == whale.root
    assert view.source == f"{accepted} @ w0" and view.source_box.value == view.source
    assert view.example == 0 and view.example_box.value == 0  # selected, not None
    for expected in ("verdict: <b style='color:#1B7F1B'>correct</b>", "tool call <b>calculator</b>",
                     "behaviour flags: answered=True", "toy/whale-0.5,2-s0"):
        assert expected in view.trace.value, expected
    assert "prefill helps" in view.diff.value and "accepted harness" in view.summary.value
    assert "★ accepted" in dict((v, k) for k, v in view.source_box.options)[view.source]


def test_switching_runs_never_leaves_the_previous_runs_trajectory(tmp_path):
    pytest.importorskip("ipywidgets")
    first = write_run(tmp_path, "whale", [0.5, 0.75], domain="toy", task="toy-1+2")
    second = write_run(tmp_path, "whale", [0.25, 0.5], domain="math", task="math-seven")
    view = viewer.browse(tmp_path, "smoke", interactive=True)
    shown = view.run
    other = second.root if shown == first.root else first.root
    before = view.trace.value
    # what the front end does: it sets the run menu's value; the same source name and example 0 remain
    view.run_box.value = other
    assert view.run == other and view.example_box.value == 0
    task = "math-seven" if other == second.root else "toy-1+2"
    assert f"task {task}" in view.trace.value and view.trace.value != before
    assert view.run_label(other) in view.trace.value and view.run_label(other) in view.summary.value
    # picking a test evaluation, then an example, renders each at once
    view.source_box.value = "test eval-001"
    assert "test eval-001" in view.trace.value and view.example_box.value == 0
    view.example_box.value = 1
    assert "example 2" in view.trace.value and "wrong" in view.trace.value


def test_default_source_and_example_prefer_accepted_correct_and_tool_calls(tmp_path):
    run = write_run(tmp_path, "whale", [0.5, 0.75])
    plain = dataclasses.replace(trajectory(), turns=[trajectory().turns[1]])
    assert viewer.default_example([trajectory(correct=False), plain, trajectory()]) == 2
    assert viewer.default_example([trajectory(correct=False), plain]) == 1
    assert viewer.default_example([]) is None
    sources = viewer.run_sources(run.root)
    assert viewer.default_source(run.root, sources) == f"{viewer.accepted_harness(run.root)} @ w0"


def test_runs_rank_whale_first_then_a_changed_harness(tmp_path):
    weights = write_run(tmp_path, "weight_only", [0.5, 0.75]).root
    whale = write_run(tmp_path, "whale", [0.0, 0.0]).root
    assert viewer.rank_runs([weights, whale]) == [whale, weights]
    assert viewer.run_rank(whale)[:3] == (True, True, True)


def test_no_runs_says_what_to_run_and_analysis_falls_back_to_the_smoke_runs(tmp_path):
    with pytest.raises(NoRunsError, match="make reproduce PRESET=smoke"):
        viewer.browse(tmp_path, "cpu", interactive=False)
    with pytest.raises(NoRunsError, match="make reproduce PRESET=cpu"):
        preset_with_runs(tmp_path, "cpu", tmp_path / "figures")
    assert "make reproduce" in "".join(NoRunsError("no runs", "cpu")._render_traceback_())  # no traceback in IPython
    write_run(tmp_path, "whale", [0.5])  # a smoke run
    said: list[str] = []
    assert preset_with_runs(tmp_path, "cpu", tmp_path / "figures", log=said.append) == \
        ("smoke", tmp_path / "figures" / "smoke")
    assert "showing the smoke runs" in said[0]
    assert preset_with_runs(tmp_path, "smoke", tmp_path / "f") == ("smoke", tmp_path / "f")
