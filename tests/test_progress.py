"""Progress lines: the formatter says kind, rollouts / budget, signal, elapsed and an ETA
from the measured rate; reused runs neither slow nor speed the estimate."""

from __future__ import annotations

from whalekit.infra import progress
from whalekit.infra.runs import RunDir


def test_durations_read_like_a_clock():
    assert [progress.format_duration(s) for s in (0, 42, 725, 7380, None, -1)] == \
        ["0:00", "0:42", "12:05", "2:03:00", "?", "?"]


def test_eta_is_remaining_work_at_the_measured_rate():
    assert progress.eta_seconds(done=256, total=1024, elapsed_s=100) == 300.0
    assert progress.eta_seconds(done=0, total=1024, elapsed_s=100) is None  # nothing measured yet
    assert progress.eta_seconds(done=1024, total=1024, elapsed_s=100) == 0.0


def test_stage_line_names_kind_rollouts_signal_elapsed_and_eta():
    line = progress.stage_line("weight", 2, rollouts=384, budget=1024, signal=0.42, elapsed_s=130)
    assert line == "weight stage 2 · rollouts 384/1024 (38 %) · training reward 0.420 · elapsed 2:10 · ETA 3:37"
    harness = progress.stage_line("harness", 3, 512, 1024, 0.5, 60, rollouts_at_start=256)  # resumed at 256
    assert "best search score 0.500" in harness and harness.endswith("ETA 2:00")


def test_stage_lines_come_from_the_events_the_driver_writes():
    events = [{"event": "run_start", "budget": 96, "rollouts": 0},
              {"event": "rsft_batch", "rollouts": 32, "reward_window_mean": 0.25},
              {"event": "stage_end", "kind": "weight", "stage": 0, "rollouts": 32},
              {"event": "search_iteration", "rollouts": 64, "best_score": 0.75},
              {"event": "stage_end", "kind": "harness", "stage": 1, "rollouts": 64}]
    lines = progress.stage_lines_from_events(events, elapsed_s=64)
    assert [line.split(" · ")[:3] for line in lines] == [
        ["weight stage 0", "rollouts 32/96 (33 %)", "training reward 0.250"],
        ["harness stage 1", "rollouts 64/96 (67 %)", "best search score 0.750"]]
    assert lines[1].endswith("ETA 0:32")
    assert len(progress.stage_lines_from_events(events, 64, after=1)) == 1


def test_the_watcher_prints_each_new_stage_once(tmp_path):
    run = RunDir(tmp_path / "run")
    run.log("run_start", budget=96, rollouts=0)
    run.log("stage_end", kind="weight", stage=0, rollouts=32)  # finished before the watcher: not repeated
    printed: list[str] = []
    with progress.RunWatcher(run.root, printed.append, interval_s=0.01):
        run.log("stage_end", kind="harness", stage=1, rollouts=64)
    assert len(printed) == 1 and printed[0].startswith("harness stage 1 · rollouts 64/96")
    with progress.RunWatcher(None, printed.append):  # analysis notebooks: nothing to watch
        pass


def test_overall_eta_uses_only_executed_jobs_and_ignores_reused_ones():
    now = [0.0]
    overall = progress.OverallProgress([100, 100, 200, 0], clock=lambda: now[0])
    now[0] = 1.0
    first = overall.finish(0, "run a", wall_s=1.0, reused=True)  # reused: no rate yet
    assert first.startswith("[1/4] run a: reused (run finished) · 25 % of the work") and first.endswith("ETA ?")
    now[0] = 51.0
    second = overall.finish(1, "run b", wall_s=50.0, reused=False)  # 0.5 s per rollout
    assert "50 % of the work" in second and second.endswith("elapsed 0:51 · ETA 1:40")  # 200 left × 0.5 s
    overall.finish(2, "run c", wall_s=100.0, reused=False)
    assert overall.finish(3, "03_main_comparison", wall_s=2.0, reused=False).endswith("ETA 0:00")


def test_job_costs_are_each_runs_budget_and_nothing_for_analysis_notebooks(tmp_path):
    from whalekit.repro import reproduce_plan

    jobs = reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"],
                          methods=["whale", "weight_only"], grid=False)
    costs = reproduce_plan.job_costs(jobs)
    assert costs == [0.0 if job.run_dir is None else 96.0 for job in jobs] and costs.count(96.0) == 2


def test_a_run_prints_a_line_per_stage_and_shows_bars_over_finished_episodes(tmp_path, monkeypatch, capsys):
    """With progress on, the driver prints one stage line per stage_end (its rollouts, signal
    and an ETA that reaches 0:00 at the budget), and RSFT, search and test rollouts each get
    a bar that counts every episode once, as it finishes."""
    import whalekit.rollouts.engine as engine
    from whalekit.run.driver import resolve_config, run_method
    from whalekit.samplers.models import load_policy

    bars: list[dict] = []

    class CountingBar:
        def __init__(self, total, config):
            self.record = {"description": config.description, "total": total, "updates": 0, "progress": True}
            bars.append(self.record)

        def update(self, n):
            assert self.record["updates"] + n <= self.record["total"], "more episodes finished than started"
            self.record["updates"] += n

        def set_postfix_str(self, text):
            pass

        def close(self):
            self.record["closed"] = True

    def counting_progress(total, config):
        if not config.progress:
            bars.append({"description": config.description, "progress": False})
        return CountingBar(total, config)

    monkeypatch.setenv(progress.QUIET_ENV, "0")
    monkeypatch.setattr(engine, "_progress", counting_progress)
    run = run_method(resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path)),
                     policy=load_policy("tiny-random"))
    lines = [line for line in capsys.readouterr().out.splitlines() if " stage " in line]
    ends = run.events("stage_end")
    assert len(lines) == len(ends) >= 2
    for line, end in zip(lines, ends):
        assert line.startswith(f"{end['kind']} stage {end['stage']} · rollouts {end['rollouts']}/96 ")
        assert ("training reward" if end["kind"] == "weight" else "best search score") in line
        if end["steps"]:  # a stage that could not take a step has no signal of its own
            assert "training reward ?" not in line and "best search score ?" not in line and "ETA ?" not in line
    weight = [e for e in run.events() if e["event"] in ("rsft_batch", "stage_end")]
    last_batch = [e for e in weight if e["event"] == "rsft_batch"][-1]
    assert f"training reward {last_batch['reward_window_mean']:.3f}" in "\n".join(lines)
    assert lines[-1].endswith("ETA 0:00") == (ends[-1]["rollouts"] == 96)
    kinds = {b["description"].split()[0] for b in bars}
    assert {"rsft", "search:", "test"} <= kinds
    assert all(b["progress"] for b in bars), [b for b in bars if not b["progress"]]
    assert all(b["updates"] == b["total"] and b.get("closed") for b in bars)
    assert sum(b["total"] for b in bars if b["description"].startswith("test")) == \
        len(run.events("test_eval")) * 2 * 4
    recorded = run.config()["provenance"]
    assert recorded["sampler"] == "hf" and len(recorded["git_commit"]) == 40 and recorded["whalekit_version"]


def test_quiet_switches_the_bar_and_the_lines_off(monkeypatch, capsys):
    from whalekit.rollouts.engine import RolloutConfig, _NoBar, _progress

    monkeypatch.setenv(progress.QUIET_ENV, "1")
    assert isinstance(_progress(10, RolloutConfig()), _NoBar)
    progress.report("weight stage 0")
    monkeypatch.setenv(progress.QUIET_ENV, "0")
    bar = _progress(10, RolloutConfig(description="rsft batch 1"))
    assert not isinstance(bar, _NoBar) and "remaining" not in bar.bar_format  # no ETA from bursts
    bar.close()
    progress.report("weight stage 1")
    assert capsys.readouterr().out == "weight stage 1\n"
