"""Time accounting: the phase clock splits wall time exactly, every run event carries its
phase seconds, and `whalekit report --timing` reads them back as a table."""

from __future__ import annotations

import pytest

from whalekit.cli.main import main
from whalekit.infra import timing
from whalekit.infra.runs import without_timings
from whalekit.run.driver import resolve_config, run_method
from whalekit.samplers.models import load_policy


class _FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_innermost_phase_owns_the_time_and_the_phases_add_up_to_the_wall_time(monkeypatch):
    clock_time = _FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", clock_time)
    clock = timing.PhaseClock()
    with timing.recording(clock):
        clock_time.now += 1.0  # outside every phase: "other"
        with timing.phase("train"):
            clock_time.now += 2.0
            with timing.phase("sync"):
                clock_time.now += 0.5
            clock_time.now += 0.25
        first = clock.take()
        with timing.phase("sample"):
            clock_time.now += 3.0
        second = clock.take()
    assert first == {"other": 1.0, "train": 2.25, "sync": 0.5}
    assert second == {"sample": 3.0}
    assert sum(clock.totals.values()) == pytest.approx(6.75)


def test_phases_without_a_recording_clock_do_nothing_and_unknown_phases_are_refused():
    with timing.phase("sample"):
        pass
    with pytest.raises(ValueError, match="unknown phase"):
        timing.PhaseClock().enter("sampling")


def test_a_run_without_timing_in_its_events_says_so_in_the_table():
    table = timing.timing_table([("old-run", {})])
    assert "old-run" in table and "no timing" in table


def test_events_carry_the_prompt_tokens_sent_since_the_last_one_and_the_share_the_prefix_cache_served(tmp_path):
    from whalekit.infra.runs import RunDir

    class CountingSampler:  # what VLLMSampler counts: prompt tokens sent, and served from its prefix cache
        prompt_tokens = cached_prompt_tokens = 0

    sampler, run = CountingSampler(), RunDir(tmp_path / "run")
    sampler.prompt_tokens, sampler.cached_prompt_tokens = 70, 7  # an earlier run's, on the same sampler
    log = timing.timed_log(run, timing.PhaseClock(), sampler)
    sampler.prompt_tokens, sampler.cached_prompt_tokens = 1070, 607
    log("rsft_batch")
    log("stage_end")  # nothing sampled in between: no counts
    sampler.prompt_tokens, sampler.cached_prompt_tokens = 1570, 1007
    log("test_eval")
    events = run.events()
    assert [e.get("prompt_cache") for e in events] == [{"sent": 1000, "cached": 600}, None,
                                                       {"sent": 500, "cached": 400}]
    assert timing.run_prompt_cache(events) == {"sent": 1500, "cached": 1000}
    assert all("prompt_cache" not in e for e in without_timings(events))  # a resumed run starts cold
    table = timing.report_timing([run.root])
    assert "prompt tok (cached)" in table.splitlines()[0] and "1500 (67%)" in table.splitlines()[1]
    # a sampler that does not count (transformers, Ray workers): no column at all
    plain = RunDir(tmp_path / "plain")
    timing.timed_log(plain, timing.PhaseClock(), object())("run_end")
    assert "prompt_cache" not in plain.events()[0] and "cached" not in timing.report_timing([plain.root])


@pytest.mark.timeout(900)
def test_every_event_of_a_tiny_run_carries_its_phase_seconds_and_report_timing_prints_them(tmp_path, capsys,
                                                                                           monkeypatch):
    from whalekit.domains.base import Verdict, get_domain

    # The tiny random model solves nothing; a verifier that accepts every episode makes its batches train.
    accept = lambda self, task, trajectory: Verdict(True, 1.0, {"format_valid": True})  # noqa: E731
    monkeypatch.setattr(type(get_domain("toy")), "verify_trajectory", accept)
    config = resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path), budget=48)
    run = run_method(config, policy=load_policy("tiny-random"))
    events = run.events()
    assert events and all(isinstance(e.get("timing"), dict) for e in events)
    totals = timing.run_timing(events)
    for name in ("sample", "train", "sync", "test_eval", "propose", "checkpoint"):
        assert totals.get(name, 0.0) > 0, (name, totals)
    assert set(totals) <= set(timing.PHASES)
    # The phases partition the driver's time: together at least the run's own wall time.
    assert sum(totals.values()) >= events[-1]["wall_s"]
    # Timing is wall clock: the resume comparison leaves it out.
    assert all("timing" not in e for e in without_timings(events))

    assert main(["report", "--timing", str(run.root)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["run", "total"]
    assert all(name in header for name in ("sample", "train", "sync", "test_eval", "propose"))
    assert row.startswith(str(run.root)) and "%" in row
