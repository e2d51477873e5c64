"""The trace viewer shows what happened (conversation, tool calls, verdict, flags), marks
exactly the tokens RSFT trains on, diffs a candidate against its parent, and falls back to
static HTML where no widget front end exists."""

from __future__ import annotations

import dataclasses

import pytest
from run_fixtures import trajectory, write_run

from whalekit import widgets
from whalekit.archive import Archive
from whalekit.rsft import training_sequences


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


def test_browse_degrades_to_static_html_without_widgets(tmp_path, monkeypatch):
    write_run(tmp_path, "whale", [0.5, 0.75])
    shown: list[str] = []
    monkeypatch.setattr(widgets, "_display", shown.append)
    assert widgets.widgets_available() is False  # plain pytest: no kernel, no front end
    monkeypatch.setenv(widgets.HEADLESS_ENV, "1")
    widgets.browse(tmp_path, "smoke")
    assert len(shown) == 1
    assert "prefill helps" in shown[0]  # the accepted candidate's diff against h0
    assert shown[0].count("class='wk-trace'") >= 3  # diff + two example trajectories


def test_run_sources_list_test_evaluations_and_scored_candidates(tmp_path):
    run = write_run(tmp_path, "whale", [0.5, 0.75])
    sources = widgets.run_sources(run.root)
    assert [name for name in sources if name.startswith("test ")] == ["test eval-000", "test eval-001"]
    assert sum(1 for name in sources if name.endswith("@ w0")) == 2  # seed and the scored child


def test_interactive_viewer_builds_widgets(tmp_path):
    pytest.importorskip("ipywidgets")
    write_run(tmp_path, "whale", [0.5, 0.75])
    viewer = widgets.browse(tmp_path, "smoke", interactive=True)
    run_box, source_box, example_box = viewer.children[0].children
    assert source_box.options[0] == "test eval-000"
    source_box.value = "test eval-001"
    assert len(example_box.options) == 2
