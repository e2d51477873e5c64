"""Specification of the chess-puzzle domain: loading, generating, verifying, tools,
harnesses and mechanisms. Fixture rows in tests/fixtures/chess/ were written by hand
from positions constructed and checked with python-chess."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import chess
import pytest

from whalekit.domains.base import get_domain
from whalekit.domains.chess import (
    ChessDomain,
    Puzzle,
    PuzzleDataError,
    generate_puzzles,
    load_lichess_csv,
    verify_answer,
)
from whalekit.domains.chess.generator import mate_in_two_line, mating_moves
from whalekit.domains.chess.mechanisms import BY_NAME, CATALOGUE, PROMPT_WORDINGS
from whalekit.domains.chess.notation import IllegalMoveError, MoveFormatError, parse_move, split_moves
from whalekit.domains.mechanisms import apply_mechanism
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, ToolRequest, load_harness
from whalekit.sandbox.isolation import validate_source
from whalekit.types import ToolCall, Trajectory, Turn

FIXTURES = Path(__file__).parent / "fixtures" / "chess"
SCHOLAR = "r1bqkbnr/ppp2ppp/2np4/4p3/2B1P3/5Q2/PPPP1PPP/RNB1K1NR w KQkq - 0 4"  # Qxf7# wins
BACK_RANK = "2r3k1/5ppp/p7/8/8/8/4RPPP/4R1K1 w - - 0 31"  # Re8+ Rxe8 Rxe8#
TWO_MATES = "7k/8/6K1/8/8/8/8/RR6 w - - 0 1"  # Ra8# and Rb8#: two mates in one


@pytest.fixture(scope="module")
def domain() -> ChessDomain:
    return ChessDomain()


@pytest.fixture(scope="module")
def generated() -> list:
    return generate_puzzles(6, mate_in=1, seed=11) + generate_puzzles(2, mate_in=2, seed=11)


# --- data: the Lichess CSV loader -------------------------------------------------------

def test_fixture_rows_load_apply_the_setup_move_and_verify_their_own_solutions():
    puzzles = load_lichess_csv(FIXTURES / "puzzles.csv")
    assert [p.puzzle_id for p in puzzles] == ["wkSch", "wkFoo", "wkBck", "wkFrk"]
    scholar = puzzles[0]
    assert scholar.fen == SCHOLAR and scholar.last_move == "d6" and scholar.solution == ("f3f7",)
    assert [p.mate_in for p in puzzles] == [1, 1, 2, None]
    assert puzzles[1].to_task().inputs["side_to_move"] == "black"
    for puzzle in puzzles:
        solver_moves = " ".join(puzzle.solution[::2])
        assert verify_answer(puzzle.fen, list(puzzle.solution), solver_moves).correct, puzzle.puzzle_id


def test_loader_filters_by_theme_and_rating():
    assert [p.puzzle_id for p in load_lichess_csv(FIXTURES / "puzzles.csv", themes=["mateIn2"])] == ["wkBck"]
    assert [p.puzzle_id for p in load_lichess_csv(FIXTURES / "puzzles.csv", themes=["mateIn1"], min_rating=640)] \
        == ["wkFoo"]
    assert len(load_lichess_csv(FIXTURES / "puzzles.csv", max_rating=1200)) == 3


def test_malformed_row_raises_naming_file_and_line():
    with pytest.raises(PuzzleDataError, match=r"malformed\.csv:3: invalid FEN"):
        load_lichess_csv(FIXTURES / "malformed.csv")


def test_malformed_rows_are_skipped_with_a_warning_each_when_asked():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        puzzles = load_lichess_csv(FIXTURES / "malformed.csv", on_error="skip")
    assert [p.puzzle_id for p in puzzles] == ["wkFoo"]
    messages = [str(w.message) for w in caught]
    assert [m.split("malformed.csv:")[1].split(":")[0] for m in messages] == ["3", "4", "5", "6"]
    assert "illegal" in messages[1] and "Rating" in messages[2] and "setup move" in messages[3]


def test_a_file_without_the_lichess_columns_is_rejected(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("id,position\n1,8/8/8/8/8/8/8/8 w - - 0 1\n")
    with pytest.raises(PuzzleDataError, match=r"other\.csv:1: not a Lichess puzzle CSV"):
        load_lichess_csv(path)


def test_every_real_lichess_puzzle_loads_and_its_solution_verifies(realdata):
    folder = realdata / "lichess_puzzles"
    files = sorted(folder.glob("*.csv"))
    assert files, f"no CSV in {folder}"
    total = 0
    for path in files:
        puzzles = load_lichess_csv(path)
        with path.open() as handle:
            assert len(puzzles) == sum(1 for _ in handle) - 1, path
        for p in puzzles:
            assert verify_answer(p.fen, list(p.solution), " ".join(p.solution[::2])).correct, (path, p.puzzle_id)
        total += len(puzzles)
    assert total == 2000


# --- generator ----------------------------------------------------------------------------

def test_generated_puzzles_are_proved_mates_of_the_stated_length(generated):
    for puzzle in generated:
        board = chess.Board(puzzle.fen)
        if puzzle.mate_in == 1:
            assert chess.Move.from_uci(puzzle.solution[0]) in mating_moves(board)
        else:
            assert not mating_moves(board) and mate_in_two_line(board) is not None
            assert len(puzzle.solution) == 3


def test_generated_solutions_pass_and_a_random_legal_non_solution_fails(generated):
    rng = random.Random(0)
    for puzzle in generated:
        board = chess.Board(puzzle.fen)
        assert verify_answer(puzzle.fen, list(puzzle.solution), " ".join(puzzle.solution[::2])).correct
        first = chess.Move.from_uci(puzzle.solution[0])
        wrong = [m for m in board.legal_moves if m != first and m not in mating_moves(board)]
        move = rng.choice(wrong)
        verdict = verify_answer(puzzle.fen, list(puzzle.solution), board.san(move))
        assert not verdict.correct and verdict.details["move_legal"], (puzzle.puzzle_id, move)


def test_generation_is_deterministic_in_the_seed_and_honours_the_knobs():
    a = generate_puzzles(2, seed=5, min_mating_moves=2)
    assert a == generate_puzzles(2, seed=5, min_mating_moves=2)
    assert all(p.meta["mating_moves"] >= 2 for p in a)
    assert a != generate_puzzles(2, seed=6, min_mating_moves=2)
    with pytest.raises(ValueError, match="mate_in"):
        generate_puzzles(1, mate_in=3)


def test_generated_puzzles_are_cached_and_read_back_equal_in_every_field(tmp_path, monkeypatch):
    from whalekit.domains.chess import generator

    monkeypatch.setenv("WHALEKIT_CACHE", str(tmp_path))
    made = generate_puzzles(3, seed=7, min_mating_moves=2)
    files = list((tmp_path / "chess-puzzles").glob("*.json"))
    assert len(files) == 1
    monkeypatch.setattr(generator, "_generate", lambda *a, **k: pytest.fail("generated again despite the cache"))
    again = generate_puzzles(3, seed=7, min_mating_moves=2)
    assert again == made and [p.meta for p in again] == [p.meta for p in made]
    monkeypatch.undo()
    monkeypatch.setenv("WHALEKIT_CACHE", str(tmp_path))
    assert generate_puzzles(3, seed=7, min_mating_moves=2, cache=False) == made  # the cache changes nothing
    files[0].write_text('[{"fen": 1}]')  # damaged: made again, not trusted
    assert generate_puzzles(3, seed=7, min_mating_moves=2) == made
    assert generate_puzzles(3, seed=8, min_mating_moves=2) != made  # other arguments, another file
    assert len(list((tmp_path / "chess-puzzles").glob("*.json"))) == 2


# --- splits -------------------------------------------------------------------------------

def test_generated_splits_are_disjoint_by_position_and_carry_no_answer_in_inputs(domain):
    splits = domain.load_splits(n_train=4, n_search=3, n_test=3, seed=1)
    parts = (splits.train, splits.search, splits.test)
    keys = [{" ".join(t.inputs["fen"].split()[:4]) for t in part} for part in parts]
    assert [len(k) for k in keys] == [4, 3, 3]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    for task in splits.test:
        assert "solution" not in task.view().inputs and task.subset == "mate_in_1"


def test_lichess_splits_from_a_file(domain):
    splits = domain.load_splits(n_train=1, n_search=1, n_test=2, seed=0, source="lichess",
                                path=FIXTURES / "puzzles.csv")
    assert len({t.id for t in splits.train + splits.search + splits.test}) == 4
    with pytest.raises(ValueError, match="need 5 distinct"):
        domain.load_splits(n_train=3, n_search=1, n_test=1, source="lichess", path=FIXTURES / "puzzles.csv")


def test_the_registry_builds_the_domain():
    assert isinstance(get_domain("chess"), ChessDomain)


# --- notation and verifier ----------------------------------------------------------------

@pytest.mark.parametrize("text", ["Qxf7#", "Qxf7", "qxf7", "QXF7+", "Qf7", "f3f7", "F3F7", "f3-f7", " Qxf7# ",
                                  "4. Qxf7#", "Qf3xf7", "Qxf7!!"])
def test_san_and_uci_spellings_name_the_same_move(text):
    assert parse_move(chess.Board(SCHOLAR), text) == chess.Move.from_uci("f3f7")
    assert verify_answer(SCHOLAR, ["f3f7"], text).correct


def test_lowercase_b_is_a_pawn_first_and_castling_accepts_zeros():
    board = chess.Board("r3k2r/8/8/8/8/n7/1P6/R3K2R w KQkq - 0 1")
    assert parse_move(board, "bxa3") == chess.Move.from_uci("b2a3")
    assert parse_move(board, "0-0") == board.parse_san("O-O")
    assert parse_move(board, "o-o-o") == board.parse_san("O-O-O")


def test_non_moves_are_format_failures_and_impossible_moves_are_illegal():
    board = chess.Board(SCHOLAR)
    for text in ["checkmate", "the queen takes", "Zz9", ""]:
        with pytest.raises(MoveFormatError):
            parse_move(board, text)
    with pytest.raises(IllegalMoveError):
        parse_move(board, "Qxf8")
    assert verify_answer(SCHOLAR, ["f3f7"], "I think Qxf7").details["reason"] == "format_invalid"
    assert verify_answer(SCHOLAR, ["f3f7"], "Qh8").details["reason"] == "illegal_move"
    assert verify_answer(SCHOLAR, ["f3f7"], "Qf6").details["reason"] == "wrong_move"
    assert verify_answer(SCHOLAR, ["f3f7"], None).details["reason"] == "no_answer"
    assert verify_answer("not a fen", ["f3f7"], "Qxf7").details["reason"] == "bad_puzzle"


def test_any_mate_counts_as_on_lichess():
    assert verify_answer(TWO_MATES, ["a1a8"], "Ra8#").correct
    assert verify_answer(TWO_MATES, ["a1a8"], "b1b8").correct  # not the stored move, but also mate


def test_multi_move_lines_play_out_against_the_scripted_replies():
    solution = ["e2e8", "c8e8", "e1e8"]
    assert verify_answer(BACK_RANK, solution, "Re8+ Rxe8#").correct
    assert verify_answer(BACK_RANK, solution, "1. Re8+ Rxe8 2. Rxe8#").correct  # the reply echoed
    assert verify_answer(BACK_RANK, solution, "e2e8, e1e8").correct
    partial = verify_answer(BACK_RANK, solution, "Re8+")
    assert not partial.correct and partial.details["reason"] == "incomplete_line"
    assert partial.details["solver_moves_correct"] == 1


def test_split_moves_drops_move_numbers():
    assert split_moves("1. Qh5 Kg8 2... Qh7#") == ["Qh5", "Kg8", "Qh7#"]


# --- the environment: the move tool and the verdict from its records ----------------------

def _back_rank_task():
    return load_lichess_csv(FIXTURES / "puzzles.csv")[2].to_task()  # e2e8 c8e8 e1e8


def test_the_move_tool_plays_the_line_against_the_scripted_replies(domain):
    task, box = _back_rank_task(), domain.toolbox()
    first = box.run(ToolCall("move", {"move": "e2e8", "played": []}), task)
    assert first.meta["outcome"] == "continue" and first.meta["reply"] == "c8e8" and not first.meta["terminal"]
    assert first.meta["observation"]["accepted_moves"] == ["e2e8"]
    assert first.meta["observation"]["last_opponent_move"] == "c8e8"
    assert "e1e8" in {m["uci"] for m in first.meta["observation"]["legal_moves"]}
    assert box.run(ToolCall("move", {"move": "e1e8", "played": ["e2e8"]}), task).meta["outcome"] == "solved"
    assert box.run(ToolCall("move", {"move": "h2h3", "played": []}), task).meta["outcome"] == "failed"
    assert box.run(ToolCall("move", {"move": "e2e9", "played": []}), task).meta["outcome"] == "unreadable"
    assert box.run(ToolCall("move", {"move": "e2a6", "played": []}), task).meta["outcome"] == "illegal"
    lied = box.run(ToolCall("move", {"move": "e1e8", "played": ["h2h3"]}), task)
    assert lied.meta["outcome"] == "failed" and lied.meta["terminal"]  # a false history loses the puzzle


def test_the_move_tool_needs_the_task_record_and_accepts_any_mate(domain):
    view_only = domain.toolbox().run(ToolCall("move", {"move": "e2e8"}), _back_rank_task().view())
    assert not view_only.ok and view_only.error == "needs_task"
    two_mates = Puzzle("t", TWO_MATES, ("a1a8",), "generated", mate_in=1).to_task()
    assert domain.toolbox().run(ToolCall("move", {"move": "b1b8"}), two_mates).meta["outcome"] == "solved"


def test_the_first_step_that_ends_the_puzzle_decides_so_probing_loses(domain):
    task = _back_rank_task()
    box = domain.toolbox()
    probe = [box.run(ToolCall("move", {"move": m, "played": []}), task) for m in ("h2h3", "e2e8")]
    finish = box.run(ToolCall("move", {"move": "e1e8", "played": ["e2e8"]}), task)
    trajectory = Trajectory(task.id, "chess", "h", 0, turns=[Turn([], [], "", "eos", tool_results=probe + [finish])])
    verdict = domain.verify_trajectory(task, trajectory)
    assert not verdict.correct and verdict.details["reason"] == "wrong_move"
    honest = Trajectory(task.id, "chess", "h", 0, turns=[Turn([], [], "", "eos", tool_results=probe[1:] + [finish])])
    assert domain.verify_trajectory(task, honest).correct
    forced = Trajectory(task.id, "chess", "h", 0, turns=[Turn([], [], "", "eos", tool_results=[finish])])
    forced.flags["initial_tool_results"] = [{"name": "move", "ok": True, "meta": probe[0].meta}]
    assert not domain.verify_trajectory(task, forced).correct  # a probe before the first turn counts too


# --- h0: the authors' turn structure -----------------------------------------------------

def _play(source: str, task, replies: list[str]):
    """Drive a harness through one episode with scripted model replies and the real
    toolbox; returns the finished request, the trajectory and the verdict."""
    domain = ChessDomain()
    driver = EpisodeDriver(load_harness(source), task.view())
    trajectory = Trajectory(task.id, "chess", "h", 0)
    pending = list(replies)
    request = driver.begin()
    prompts = []
    while not isinstance(request, Finished):
        if isinstance(request, ToolRequest):
            results = [domain.toolbox().run(c, task) for c in request.calls]
            if trajectory.turns:
                trajectory.turns[-1].tool_calls.extend(request.calls)
                trajectory.turns[-1].tool_results.extend(results)
            request = driver.after_tools(results)
        else:
            assert isinstance(request, GenerateRequest)
            prompts.append(request)
            reply = pending.pop(0) if pending else "no idea"
            trajectory.turns.append(Turn([], [], reply, "eos", request.settings.prefill))
            request = driver.after_generation(reply, request.settings.prefill)
    trajectory.final_answer = request.answer
    trajectory.messages = request.messages
    verdict = domain.verify_trajectory(task, trajectory)
    trajectory.correct = verdict.correct
    trajectory.flags = domain.behaviour(trajectory, task, verdict)
    return request, trajectory, verdict, prompts


H0 = ChessDomain().initial_harness_source()


def test_h0_shows_the_authors_observation_and_asks_for_a_tagged_uci_move():
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    _, trajectory, verdict, prompts = _play(H0, task, ["<move>f3f7</move>"])
    assert verdict.correct and len(trajectory.turns) == 1
    system, user = prompts[0].messages
    assert system.role == "system" and "one legal move at a time" in system.content
    for part in ["Side to move: White", f"FEN: {SCHOLAR}", "Board:\n8 r . b q k b n r", "Puzzle move number: 1",
                 "Legal moves:\n- [a2a3] SAN=a3", "- [b1a3] SAN=Na3", "- [f3f7] SAN=Qxf7", "<move>uci</move>"]:
        assert part in user.content, part
    assert "Last opponent reply" not in user.content  # none yet, as in the authors' runner


@pytest.mark.parametrize("reply", ["<move>f3f7</move>", "I pick [f3f7].", "f3f7", "<move>F3F7</move> f3f7"])
def test_h0_reads_a_tag_a_bracketed_move_or_one_bare_uci_move(reply):
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    assert _play(H0, task, [reply])[2].correct


def test_h0_plays_a_line_move_by_move_against_the_scripted_replies():
    _, trajectory, verdict, prompts = _play(H0, _back_rank_task(), ["<move>e2e8</move>", "<move>e1e8</move>"])
    assert verdict.correct and len(prompts) == 2
    second = prompts[1].messages
    assert [m.role for m in second] == ["system", "assistant", "user", "user"]  # latest observation last
    assert second[2].content.startswith("Correct. Opponent replied c8e8")
    assert "Last opponent reply: c8e8" in second[3].content and "accepted moves so far: e2e8" in second[3].content
    assert "FEN: 4r1k1/5ppp/p7/8/8/8/5PPP/4R1K1 w - - 0 32" in second[3].content
    assert trajectory.final_answer == "e2e8 e1e8"


def test_h0_retries_a_format_failure_once_with_the_verifiers_note():
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    _, trajectory, verdict, prompts = _play(H0, task, ["Queen takes f7", "<move>f3f7</move>"])
    assert verdict.correct and len(prompts) == 2
    assert "Feedback from the verifier:" in prompts[1].messages[-1].content
    assert "__no_move__" in prompts[1].messages[-1].content
    ambiguous = _play(H0, task, ["f3f7 or f3f6", "e2e4 or d2d4", "<move>f3f7</move>"])
    assert not ambiguous[2].correct and len(ambiguous[3]) == 2  # the second format failure ends the puzzle
    assert ambiguous[2].details["reason"] == "format_invalid"


def test_h0_retries_an_illegal_move_once_then_fails():
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    _, _, verdict, prompts = _play(H0, task, ["<move>f3f8</move>", "<move>f3f7</move>"])
    assert verdict.correct and len(prompts) == 2
    assert 'The move "f3f8" is not legal' in prompts[1].messages[-1].content
    _, trajectory, verdict, prompts = _play(H0, task, ["<move>f3f8</move>", "<move>a1a5</move>", "<move>f3f7</move>"])
    assert not verdict.correct and len(prompts) == 2 and verdict.details["reason"] == "illegal_move"
    assert ChessDomain().failure_mode(trajectory) == "illegal_move"


def test_h0_a_legal_wrong_move_ends_the_puzzle_at_once():
    _, trajectory, verdict, prompts = _play(H0, _back_rank_task(), ["<move>h2h3</move>", "<move>e2e8</move>"])
    assert not verdict.correct and len(prompts) == 1 and verdict.details["reason"] == "wrong_move"
    assert ChessDomain().failure_mode(trajectory) == "wrong_move"


def test_h0_makes_at_most_nine_model_calls():
    # both retry budgets raised so only the call cap stops the episode
    source = H0.replace("format_retries = 1", "format_retries = 50")
    _, _, verdict, prompts = _play(source, _back_rank_task(), ["no move"] * 20)
    assert len(prompts) == 9 and not verdict.correct


# --- mechanisms and h1 ---------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", CATALOGUE + PROMPT_WORDINGS, ids=lambda m: m.name)
def test_every_mechanism_applies_to_h0_validates_and_solves_with_a_correct_reply(domain, mechanism):
    source = apply_mechanism(domain.initial_harness_source(), mechanism)
    problem = validate_source(source)
    assert problem is None, problem
    _, _, verdict, _ = _play(source, _back_rank_task(), ["<move>e2e8</move>", "<move>e1e8</move>"])
    assert verdict.correct, mechanism.name
    assert set(mechanism.targets) <= set(domain.failure_modes)


def test_the_domain_offers_its_catalogue_of_six_to_ten_distinct_mechanisms(domain):
    names = [m.name for m in domain.mechanisms()]
    assert names == [m.name for m in CATALOGUE] and 6 <= len(names) <= 10 and len(set(names)) == len(names)
    assert "legal_moves_by_kind" not in names


def test_mechanisms_on_different_hooks_compose(domain):
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    source = domain.initial_harness_source()
    for name in ["piece_lists", "legal_moves_by_piece", "lenient_parser", "retry_with_legal_list", "few_shot_format"]:
        source = apply_mechanism(source, BY_NAME[name])
    _, trajectory, verdict, prompts = _play(source, task, [" the queen takes: Qxf7, that is it"])
    assert verdict.correct
    text = "\n".join(m.content for m in prompts[0].messages)
    assert "White: Ke1, Qf3" in text and "Queen f3: " in text and "<move>e2e4</move>" in text


def test_h1_solves_with_constrained_choices_and_stays_valid(domain):
    source = domain.harness_source("h1")
    assert validate_source(source) is None
    _, _, verdict, prompts = _play(source, _back_rank_task(), ["<move>e2e8</move>", "<move>e1e8</move>"])
    assert verdict.correct
    assert "<move>e1e8</move>" in prompts[1].settings.choices  # the choices follow the position


def test_legal_move_choice_constrains_every_reply_to_a_legal_move(domain, tiny_policy):
    """Even a random-weight model answers in format and legally once decoding is constrained."""
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout

    tasks = [p.to_task() for p in generate_puzzles(4, seed=5)]
    harness = InProcessHarness(apply_mechanism(domain.initial_harness_source(), BY_NAME["legal_move_choice"]))
    trajectories = rollout(domain, [Episode(t, harness, k) for t in tasks for k in range(2)], tiny_policy.sampler,
                           RolloutConfig(seed=0, progress=False))
    for trajectory in trajectories:
        assert trajectory.flags["format_valid"] and trajectory.flags["move_legal"]
        assert trajectory.error is None and len(trajectory.turns) == 1  # a legal move is right or ends the puzzle


def test_behaviour_flags_and_failure_modes_from_final_answers(domain):
    """A harness that never calls `move` is graded on its final answer."""
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    cases = {"Qxf7#": None, "Qf6": "wrong_move", "Qh8": "illegal_move", "hello": "format_invalid", None: "no_answer"}
    for answer, mode in cases.items():
        trajectory = Trajectory(task.id, "chess", "h", 0, final_answer=answer)
        verdict = domain.verify_trajectory(task, trajectory)
        trajectory.correct = verdict.correct
        trajectory.flags = domain.behaviour(trajectory, task, verdict)
        assert {"format_valid", "move_legal", "move_correct", "turns", "generated_tokens"} <= set(trajectory.flags)
        assert domain.failure_mode(trajectory) == mode, answer


@pytest.mark.slow
def test_h0_rollout_with_smollm_is_verified_and_flagged(smollm_policy, domain):
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout

    tasks = load_lichess_csv(FIXTURES / "puzzles.csv")[:2] + generate_puzzles(2, seed=3)
    tasks = [p.to_task() for p in tasks]
    harness = InProcessHarness(domain.initial_harness_source())
    episodes = [Episode(task, harness, i) for task in tasks for i in range(2)]
    trajectories = rollout(domain, episodes, smollm_policy.sampler, RolloutConfig(progress=False))
    assert len(trajectories) == 8
    for trajectory in trajectories:
        assert trajectory.error is None and "wall_s" in trajectory.timings
        assert {"format_valid", "move_legal", "move_correct", "turns", "generated_tokens"} <= set(trajectory.flags)
        assert 1 <= trajectory.flags["turns"] <= 9
        assert trajectory.correct == trajectory.flags["move_correct"]
        assert domain.failure_mode(trajectory) in (None, *domain.failure_modes)
