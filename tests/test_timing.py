"""Time accounting: the phase clock splits wall time exactly, every run event carries its
phase seconds, and `whalekit report --timing` reads them back as a table."""

from __future__ import annotations

import pytest

from whalekit import timing
from whalekit.cli import main
from whalekit.models import load_policy
from whalekit.runs import without_timings
from whalekit.whale import resolve_config, run_method


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
