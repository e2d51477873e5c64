"""What a proposer reads of a failing episode: every message but the system prompt and the
few-shot examples, each cut in its middle (head and tail kept, the cut marked with its size),
the ending (final answer, error) always shown, so the failure itself is never cut away however
long the prompt was."""

from __future__ import annotations

from pathlib import Path

from whalekit.domains.toy import ToyDomain
from whalekit.search.archive import Archive
from whalekit.search.proposers.report import CUT_MARKER, cut_middle, episode_text, render_report
from whalekit.types import Message, Trajectory

H0 = ToyDomain().initial_harness_source()
LEGAL = "\n".join(f"- [{a}{b}] SAN=x{i}" for i, (a, b) in enumerate(zip("abcdefgh" * 5, "1234567812345678" * 3)))
QUESTION = "Solve the current chess puzzle position.\n\nLegal moves:\n" + LEGAL + "\n\nGive exactly one move."


def chess_like_episode(task_id: str = "t1", replies: int = 2) -> Trajectory:
    """A failing episode whose question alone is longer than a trace's 700 characters."""
    messages = [Message("system", "SYSTEM PROMPT " * 30), Message("user", "EXAMPLE QUESTION", kind="few_shot"),
                Message("assistant", "<move>a1a2</move>", kind="few_shot"), Message("user", QUESTION)]
    for turn in range(replies):
        messages.append(Message("assistant", "Let me think about the position. " * 8 + f"<move>z{turn}z9</move>"))
        messages.append(Message("user", f"The move z{turn}z9 is not legal here. " + LEGAL, kind="feedback"))
    messages.append(Message("assistant", "I pick <move>e2e4"))
    return Trajectory(task_id, "toy", "h", 0, messages=messages, final_answer=None, error="no closed <move> tag")


def test_a_long_text_keeps_its_head_and_tail_and_says_how_much_was_cut():
    text = "HEAD" + "x" * 1000 + "TAIL"
    cut = cut_middle(text, 200)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and len(cut) <= 200
    [marker] = CUT_MARKER.findall(cut)
    cut_out = int(marker.split()[1])
    assert len(cut) - len(marker) - 2 + cut_out == len(text), "the marker counts exactly the characters left out"
    assert cut_middle("short", 200) == "short"


def test_the_failing_reply_and_the_ending_survive_a_prompt_longer_than_the_limit():
    text = episode_text(chess_like_episode(), 700)
    assert "SYSTEM PROMPT" not in text and "EXAMPLE" not in text, "the harness source holds both"
    assert "[assistant] I pick <move>e2e4" in text, "the last reply, whole"
    assert text.endswith("[end] final answer: None; error: no closed <move> tag")
    assert "[user/feedback] The move z0z9 is not legal" in text and CUT_MARKER.search(text)
    assert len(text) < 900, "about the limit: each message gets its share"


def test_a_long_episode_keeps_its_question_and_its_last_messages_and_counts_the_rest():
    text = episode_text(chess_like_episode(replies=12), 700)
    assert text.startswith("[user] Solve the current chess puzzle")
    assert "21 messages left out …]" in text and "[assistant] I pick <move>e2e4" in text


def test_the_failure_report_shows_each_failing_trace_through_the_same_view(tmp_path: Path):
    archive = Archive.open(tmp_path / "archive", "toy")
    seed = archive.ensure_seed(H0)
    archive.record_evaluation(seed, 0, [chess_like_episode()], ["format"])
    report = render_report(archive, 0)
    assert "    [assistant] I pick <move>e2e4" in report and "    [end] final answer: None" in report
