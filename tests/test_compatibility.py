"""The θ×h compatibility matrix (whalekit.repro.compatibility): a run made with
`keep_stage_weights` keeps each weight stage's checkpoint, every (θ_i, h_j) pair of it is scored
on an analysis split that shares no task with train, search or test, and the reading names
where a harness or weights fit their own partner best."""

from __future__ import annotations

import json

import pytest

from whalekit.domains.base import analysis_split, get_domain
from whalekit.infra.runs import RunDir
from whalekit.report.compatibility import Agent, Matrix, load_matrix, reading
from whalekit.repro.compatibility import score_matrix, stage_agents
from whalekit.run.driver import resolve_config, run_method


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    config = resolve_config("smoke", domain="toy", method="whale", seed=0, keep_stage_weights=True,
                            runs_root=str(tmp_path_factory.mktemp("runs")))
    return run_method(config)


def test_a_run_keeps_each_weight_stage_s_last_checkpoint(kept_run):
    weight_stages = [e["stage"] for e in kept_run.events("stage_end") if e["kind"] == "weight"]
    kept = sorted(p.name for p in (kept_run.root / "stage-weights").iterdir())
    assert kept == [f"stage-{s:02d}" for s in weight_stages] and len(kept) >= 2
    # each is the checkpoint of its stage's last batch: the batches done by then
    batches = [json.loads((kept_run.root / "stage-weights" / name / "trainer_state.json").read_text())["batches"]
               for name in kept]
    assert batches == sorted(batches) and len(set(batches)) == len(batches)
    assert len(list((kept_run.root / "checkpoints").iterdir())) == 1  # resuming still keeps only the latest


def test_the_analysis_split_shares_no_task_with_the_run_s_splits():
    domain = get_domain("math")
    splits = domain.load_splits(n_train=40, n_search=8, n_test=8, seed=3)
    analysis = analysis_split(domain, splits, 16, seed=3)
    held = {t.id for part in (splits.train, splits.search, splits.test) for t in part}
    assert len(analysis) == 16 and not held & {t.id for t in analysis}
    assert [t.id for t in analysis] == [t.id for t in analysis_split(domain, splits, 16, seed=3)]
    with pytest.raises(ValueError, match="cannot draw"):
        analysis_split(get_domain("toy", max_operand=4), get_domain("toy", max_operand=4).load_splits(
            n_train=10, n_search=5, n_test=5, seed=0), 20, seed=0)


def test_every_pair_of_the_run_s_weights_and_harnesses_is_scored(kept_run, tmp_path):
    weights, harnesses = stage_agents(RunDir(kept_run.root))
    out = tmp_path / "matrix.json"
    matrix = score_matrix(kept_run.root, n=4, k=1, out=out)
    assert [w.label for w in matrix.weights] == [w.label for w in weights]
    assert len(matrix.cells) == len(weights) * len(harnesses)
    for cell in matrix.cells.values():
        assert len(cell["per_problem"]) == 4 and 0 <= cell["mean"] <= 1
        assert cell["mean"] == pytest.approx(sum(cell["per_problem"].values()) / 4)  # k samples each problem
        assert cell["by_subset"] and all(0 <= v <= 1 for v in cell["by_subset"].values())  # a new mix reads these
    written = load_matrix(out)
    assert written.cells == matrix.cells and "reading" in json.loads(out.read_text())
    again = score_matrix(kept_run.root, n=4, k=1, out=out)  # a finished matrix is read back, not scored again
    assert {key: c["wall_s"] for key, c in again.cells.items()} == {key: c["wall_s"] for key, c in matrix.cells.items()}


def test_a_run_without_kept_weights_is_refused_with_what_to_do(tmp_path):
    config = resolve_config("smoke", domain="toy", method="weight_only", seed=0, runs_root=str(tmp_path))
    run = run_method(config)
    with pytest.raises(FileNotFoundError, match="keep_stage_weights: true"):
        stage_agents(RunDir(run.root))


def _matrix(scores: dict[str, float]) -> Matrix:
    weights = [Agent("θ0", None, "", "h0"), Agent("θ1", 0, "w", "h0")]
    harnesses = [Agent("h0", None, "a", "θ0"), Agent("h1", 1, "b", "θ1")]
    return Matrix("r", "toy", "whale", 0, 4, 8, weights, harnesses,
                  {key: {"mean": value, "per_problem": {}, "wall_s": 0.0} for key, value in scores.items()})


def test_the_reading_finds_conditional_over_optimisation_when_the_diagonal_wins():
    # h1 was searched under θ1: it helps θ1 (+0.3) and hurts θ0 (-0.1); θ1 trained with h0 helps more under h0
    fitted = reading(_matrix({"θ0|h0": 0.2, "θ0|h1": 0.1, "θ1|h0": 0.5, "θ1|h1": 0.8}))
    assert fitted["harness_gains"]["h1"]["gain_under_own_weights"] == pytest.approx(0.3)
    assert fitted["harness_gains"]["h1"]["mean_gain_under_other_weights"] == pytest.approx(-0.1)
    assert fitted["weight_gains"]["θ1"]["gain_under_own_harness"] == pytest.approx(0.3)
    assert fitted["weight_gains"]["θ1"]["mean_gain_under_other_harnesses"] == pytest.approx(0.7)
    assert fitted["best_harness_per_weights"] == {"θ0": "h0", "θ1": "h1"}
    assert fitted["best_weights_per_harness"] == {"h0": "θ1", "h1": "θ1"}


def test_the_heatmap_draws_every_cell_and_outlines_each_harness_with_its_own_weights(tmp_path):
    from whalekit.report.compatibility_plots import compatibility_figure
    from whalekit.report.plot_style import overlapping_texts, save_figure

    matrix = _matrix({"θ0|h0": 0.2, "θ0|h1": 0.1, "θ1|h0": 0.5, "θ1|h1": 0.8})
    matrix.conditions = {"model": "smollm2-135m", "proposer": "reflective", "split": "analysis", "cpu_kind": "a CPU"}
    fig = compatibility_figure([matrix, matrix])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(texts) == ["10", "20", "50", "80"]
    outlined = [p for p in fig.axes[0].patches if not p.get_fill()]
    assert [(p.get_x(), p.get_y()) for p in outlined] == [(-0.5, -0.5), (0.5, 0.5)]  # h0 with θ0, h1 with θ1
    assert overlapping_texts(fig) == []
    assert all(path.exists() for path in save_figure(fig, tmp_path / "fig"))
    wide = _matrix({"θ0|h0": 0.2, "θ0|h1": 0.1, "θ1|h0": 0.5, "θ1|h1": 0.8})
    wide.harnesses += [Agent(f"h{j}", j, f"x{j}", "θ0") for j in (2, 3)]
    wide.cells.update({f"θ{i}|h{j}": {"mean": 0.3, "per_problem": {}, "wall_s": 0.0} for i in (0, 1) for j in (2, 3)})
    wide.conditions = matrix.conditions
    assert overlapping_texts(compatibility_figure([matrix, wide])) == []  # four columns still read
    with pytest.raises(ValueError, match="score a run"):
        compatibility_figure([])
