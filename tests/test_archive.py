"""The archive keeps every candidate on disk, survives a kill mid-write, and ranks by
search-split score at one weights version."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from whalekit.domains.toy import ToyDomain
from whalekit.episode import harness_id
from whalekit.search.archive import Archive
from whalekit.search.proposers.report import render_report
from whalekit.types import Trajectory

H0 = ToyDomain().initial_harness_source()


def _trajectories(correct: list[bool], version: int = 0) -> list[Trajectory]:
    return [Trajectory(task_id=f"t{i}", domain="toy", harness_id="h", sample_index=i, correct=c, reward=float(c),
                       final_answer="1" if c else None, policy_version=version,
                       flags={"truncated": not c, "turns": 1 + i}) for i, c in enumerate(correct)]


def _modes(trajs: list[Trajectory]) -> list[str | None]:
    return [None if t.correct else "no_answer" for t in trajs]


def test_candidates_are_content_addressed_and_reopen_with_their_records(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, "toy")
    seed = archive.ensure_seed(H0)
    child_source = H0.replace("number only", "digits only")
    child = archive.add(child_source, [seed], "shorter words", "prompt", "test", 1)
    assert seed == harness_id(H0) and archive.add(child_source) == child  # same source, same id, no duplicate
    trajs = _trajectories([True, False, True])
    assert archive.record_evaluation(child, 0, trajs, _modes(trajs)) == pytest.approx(2 / 3)

    reopened = Archive.open(tmp_path, "toy")
    assert [e.id for e in reopened.entries()] == [seed, child]
    assert reopened.entry(child).parent_ids == [seed] and reopened.entry(child).hypothesis == "shorter words"
    assert reopened.source(child) == child_source
    assert [t.task_id for t in reopened.trajectories(child, 0)] == ["t0", "t1", "t2"]
    assert [o["failure_mode"] for o in reopened.outcomes(child, 0)] == [None, "no_answer", None]
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["schema_version"] == 1 and len(index["candidates"]) == 2


def test_accepted_is_best_at_the_current_weights_version_and_ties_go_to_the_earlier(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, "toy")
    seed = archive.ensure_seed(H0)
    assert archive.accepted() == seed  # nothing scored yet
    a = archive.add(H0 + "\n# a\n", [seed])
    b = archive.add(H0 + "\n# b\n", [seed])
    for cid, correct in ((seed, [True, False]), (a, [True, True]), (b, [True, True])):
        archive.record_evaluation(cid, 0, _trajectories(correct), _modes(_trajectories(correct)))
    assert archive.accepted() == a
    # new weights: only the seed re-scored so far, and it now beats the stale scores
    archive.record_evaluation(seed, 1, _trajectories([True, True, True]), [None] * 3)
    assert archive.accepted() == seed and archive.accepted(0) == a
    assert [row[0] for row in archive.leaderboard(0)] == [a, b, seed]


def test_equal_scores_go_to_the_candidate_with_fewer_mean_turns_then_to_the_earlier(tmp_path: Path) -> None:
    """The authors' tie-break (fewer mean turns); whalekit broke ties by age before."""
    from whalekit.types import Turn

    def with_turns(n: int) -> list[Trajectory]:
        trajs = _trajectories([True, False])
        for t in trajs:
            t.turns = [Turn([1], [2], "x", "eos", "") for _ in range(n)]
        return trajs

    archive = Archive.open(tmp_path, "toy")
    seed = archive.ensure_seed(H0)
    older, newer, same = (archive.add(H0 + f"\n# {name}\n", [seed]) for name in ("older", "newer", "same"))
    for cid, turns in ((older, 3), (newer, 1), (same, 1)):
        archive.record_evaluation(cid, 0, with_turns(turns), _modes(with_turns(turns)))
    assert archive.entry(newer).scores[0]["mean_turns"] == 1.0
    assert [row[0] for row in archive.leaderboard(0)] == [newer, same, older]
    assert Archive.open(tmp_path, "toy").accepted(0) == newer  # read back from disk


def test_report_groups_failures_and_shows_what_new_weights_solve_or_lose(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, "toy")
    seed = archive.ensure_seed(H0)
    archive.record_evaluation(seed, 0, _trajectories([True, False, False]), [None, "no_answer", "wrong_answer"])
    archive.record_evaluation(seed, 1, _trajectories([False, True, False]), ["wrong_answer", None, "wrong_answer"])
    child = archive.add(H0.replace("max_turns = 1", "max_turns = 2"), [seed], "retry")
    archive.mark_invalid(child, "dry run failed: boom")
    text = render_report(archive)
    assert "### wrong_answer: 2 tasks" in text
    assert "behaviour flags over these failures: truncated=2/2, turns=mean 2.00" in text
    assert "now solved: ['t1']" in text and "now lost: ['t0']" in text
    assert "dry run failed: boom" in text


def test_malformed_record_names_the_file_and_line(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, "toy")
    seed = archive.ensure_seed(H0)
    archive.record_evaluation(seed, 0, _trajectories([True, False]), [None, "no_answer"])
    path = tmp_path / "candidates" / seed / "outcomes_w0.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"outcomes_w0.jsonl:3: invalid JSON"):
        archive.outcomes(seed, 0)


def test_archive_of_another_domain_is_refused(tmp_path: Path) -> None:
    Archive.open(tmp_path, "toy").ensure_seed(H0)
    with pytest.raises(ValueError, match="belongs to domain 'toy'"):
        Archive.open(tmp_path, "chess")


_WRITER = """
import sys
from whalekit.search.archive import Archive
from whalekit.types import Trajectory
archive = Archive.open(sys.argv[1], "toy")
seed = archive.ensure_seed(open(sys.argv[2]).read())
big = [Trajectory(task_id=f"t{i}", domain="toy", harness_id="h", sample_index=i, final_answer="x" * 20000)
       for i in range(40)]
i = 0
print("ready", flush=True)
while True:
    cid = archive.add(f"# {i}\\n" + open(sys.argv[2]).read(), [seed], "h" * 5000)
    archive.record_evaluation(cid, 0, big, ["no_answer"] * len(big))
    i += 1
"""


def test_archive_survives_a_kill_during_writes_and_reopens(tmp_path: Path) -> None:
    h0_file = tmp_path / "h0.py"
    h0_file.write_text(H0)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "arch"), str(h0_file)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)  # many candidates and multi-megabyte trajectory files are being written now
    proc.kill()
    proc.wait()
    archive = Archive.open(tmp_path / "arch", "toy")
    assert len(archive) >= 2
    for entry in archive.entries():  # every listed candidate is whole and readable
        archive.source(entry.id)
        if entry.status == "evaluated":
            assert len(archive.trajectories(entry.id, 0)) == 40
    archive.add(H0 + "\n# after the kill\n")  # and the run continues
    assert len(Archive.open(tmp_path / "arch", "toy")) == len(archive)


def test_opening_an_archive_to_read_it_leaves_its_files_untouched(tmp_path: Path) -> None:
    Archive.open(tmp_path, "toy").ensure_seed(H0)
    index = tmp_path / "index.json"
    before = (index.read_text(), index.stat().st_mtime_ns)
    time.sleep(0.01)
    Archive.open(tmp_path, "toy")  # the figures open committed records this way
    assert (index.read_text(), index.stat().st_mtime_ns) == before
    index.unlink()
    Archive.open(tmp_path, "toy")  # the cache is rebuilt from the folders when missing
    assert index.read_text() == before[0]
