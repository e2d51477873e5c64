"""docs/proposers.md from the proposer-strength records: valid and novel rates over all
attempts, the test score of the accepted harness with its t-interval over seeds and its
per-seed values, paired against the reflective proposer, and h0 as the no-search row."""

from __future__ import annotations

from whalekit.report.proposer_table import markdown


def _record(proposer: str, seed: int, final: float, valid: int = 2, rejected: int = 0, novel: int = 0):
    problems = [f"p{i}" for i in range(4)]
    return {"domain": "math", "proposer": proposer, "seed": seed, "iterations": 3, "cpu_kind": "CPU A",
            "attempts": valid + rejected, "best_search_score": 0.5, "propose_s": 6.0, "accepted_is_seed": False,
            "accepted_diff": "", "accepted_novel": False,
            "candidates": [{"valid": True, "novel": i < novel, "wall_s": 60.0 if proposer == "local" else None,
                            "tokens_out": 900 if proposer == "local" else None} for i in range(valid)],
            "rejected_after_repairs": [{"wall_s": 120.0} for _ in range(rejected)],
            "test": {"k": 8, "initial": 0.25, "final": final,
                     "initial_per_problem": {p: 0.25 for p in problems},
                     "final_per_problem": {p: final for p in problems}}}


def test_each_proposer_gets_its_rates_its_test_interval_and_its_pairing_with_reflective():
    records = [_record("reflective", s, f) for s, f in enumerate([0.5, 0.5, 0.75])]
    records += [_record("local", s, f, valid=1, rejected=1, novel=1) for s, f in enumerate([0.75, 0.75, 0.75])]
    text = markdown(records)
    rows = {line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("| math")}
    assert "no search (h0)" in rows and "25.0 [25.0, 25.0] n=3" in rows["no search (h0)"]
    local = rows["local"]
    assert "| 3/6 (50 %) | 3/3 (100 %) |" in local, "valid over all attempts, novel over the valid ones"
    assert "+16.7" in local and "+25.0 / +25.0 / +0.0" in local, "paired per seed against reflective"
    assert "| 90 |" in local, "seconds per attempt, rejected ones included"
    assert "Seeds recorded: math local: 0, 1, 2; math reflective: 0, 1, 2" in text


def test_no_record_says_how_to_make_them():
    assert "bench/proposer_strength.py" in markdown([])


def _in(domain: str, record: dict) -> dict:
    return {**record, "domain": domain}


def test_the_local_model_becomes_the_default_only_where_its_seeds_beat_reflective_on_two_domains():
    from whalekit.report.proposer_table import decision

    better = [_in(d, _record(p, s, f)) for d in ("chess", "math") for s in range(3)
              for p, f in (("reflective", 0.5 - 0.05 * s), ("local", 0.7 - 0.05 * s))]
    assert "**local becomes the cpu default**" in "\n".join(decision(better))
    one_domain = [r for r in better if r["domain"] == "math"]
    assert "**reflective stays the cpu default**" in "\n".join(decision(one_domain))
    one_seed = [r for r in better if r["seed"] == 0]
    text = "\n".join(decision(one_seed))
    assert "**reflective stays the cpu default**" in text and "one seed: not decidable" in text


def test_the_half_size_coder_gets_its_own_row_and_its_own_decision():
    records = [_record(p, s, f) for s in range(3)
               for p, f in (("reflective", 0.5), ("local", 0.5 + 0.01 * s), ("local-0.5b", 0.25 + 0.01 * s))]
    text = markdown(records)
    rows = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| math")]
    assert rows == ["no search (h0)", "reflective", "local", "local-0.5b"]
    assert "`local` replaces `reflective`" in text and "`local-0.5b` replaces `reflective`" in text
    assert "local-0.5b − reflective = -24.0 [-26.5, -21.5] n=3" in text


def test_the_strength_bench_runs_the_half_size_coder_as_the_local_proposer_on_the_smaller_model():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "proposer_strength", Path(__file__).resolve().parents[1] / "bench" / "proposer_strength.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    command = bench.run_command("math", "local-0.5b", 1, 3, Path("runs/proposers"))
    settings = [command[i + 1] for i, flag in enumerate(command) if flag == "--set"]
    assert "proposer=local" in settings and "proposer_options.model=qwen2.5-coder-0.5b" in settings
    assert str(Path("runs/proposers/local-0.5b/i3")) in command, "its runs sit apart from the 1.5B model's"
    assert "proposer_options.model=qwen2.5-coder-0.5b" not in bench.run_command("math", "local", 1, 3, Path("r"))
    # a budget of rounds (harness_only capped at its proposer iterations), not of rollouts: a round
    # whose candidates all failed validation counts, as in a WHALE harness phase
    assert {"budget.mode=weight_steps", "budget.search_iterations=3"} <= set(settings)
    assert not any(s.startswith("budget.rollouts") for s in settings)


def test_full_whale_runs_with_the_local_proposer_sit_beside_the_reproductions_split_by_lever(tmp_path):
    from run_fixtures import write_run

    from whalekit.report.proposer_table import whale_runs_section

    local, reference = tmp_path / "local", tmp_path / "reference"
    run = write_run(local, "whale", [0.25, 0.5, 0.375, 0.75])  # weight +25, harness -12.5, weight +37.5 points
    config = run.config()
    config["provenance"] = {**(config.get("provenance") or {}), "cpu_kind": "AMD EPYC, AVX2, no native bf16",
                            "git_commit": "4ba6246c0ffee"}
    run.write_config(config)
    for seed, scores, chip in ((0, [0.25, 0.5, 0.625, 0.75], "Intel(R) Xeon(R) Processor"),  # harness +12.5
                               (1, [0.25, 0.5, 0.5, 0.75], "AMD EPYC 9B14")):  # harness 0
        ran = write_run(reference, "whale", scores, seed=seed)
        config = ran.config()
        config["provenance"] = {**(config.get("provenance") or {}),
                                "cpu_kind": f"{chip}, native bf16 (AVX512-BF16/AMX)"}
        ran.write_config(config)
    write_run(reference, "weight_only", [0.25, 0.75], seed=0)  # not a WHALE run: left out
    rows = {line.split("|")[2].strip(): line for line in whale_runs_section(local, reference, preset="smoke")
            if line.startswith("| toy")}
    assert set(rows) == {"reflective", "local"}
    # the fixture's one search round logs no evaluated candidate (of 2 a round) yet accepts its child over h0
    assert "| 0 | 25.0 → 75.0 | -12.5 | +62.5 | 0/2, 1 accepted | qwen2.5-coder-1.5b |" in rows["local"]
    assert rows["local"].endswith("| AVX2, AMD EPYC | 4ba6246 |"), "a CPU without native bf16, though its name " \
        "says 'native bf16', named by its chip; and the commit the local run ran"
    assert rows["reflective"].endswith("| bf16, Intel Xeon / bf16, AMD EPYC 9B14 | — |"), \
        "each seed's chip, trademarks dropped; the reproduction's code is the dry run's business, not this table's"
    assert "| 0, 1 | 25.0 → 75.0 / 25.0 → 75.0 | +6.2 (seeds +12.5 / +0.0) |" in rows["reflective"]
    assert whale_runs_section(tmp_path / "none", reference, preset="smoke") == []

    # runs made by proposer code since changed sit in their own folder (one code per folder) and row
    older = tmp_path / "older"
    write_run(older, "whale", [0.25, 0.5, 0.5, 0.5])
    rows = {line.split("|")[2].strip(): line for line in whale_runs_section(
        local, reference, preset="smoke", superseded=[("v1 proposer", older)]) if line.startswith("| toy")}
    assert set(rows) == {"reflective", "local", "local, v1 proposer"}
    assert "| 25.0 → 50.0 | +0.0 | +25.0 |" in rows["local, v1 proposer"]
    # the current proposer's runs made by two package versions (a folder holds one) sit in one series
    other_version = tmp_path / "local-other-version"
    write_run(other_version, "whale", [0.25, 0.5, 0.75, 0.75], seed=1)
    section = whale_runs_section([local, other_version], reference, preset="smoke")
    rows = {line.split("|")[2].strip(): line for line in section if line.startswith("| toy")}
    assert "| 0, 1 | 25.0 → 75.0 / 25.0 → 75.0 |" in rows["local"], "one row, both folders' runs, seed by seed"
    assert f"`{local}` and `{other_version}`: one folder per package version" in "\n".join(section)
    section = "\n".join(whale_runs_section([local, tmp_path / "absent"], reference, preset="smoke"))
    assert f"`{local}`)" in section and "absent" not in section, "a folder with no run is not named as a source"
    only_older = whale_runs_section(tmp_path / "none", reference, preset="smoke", superseded=[("v1 proposer", older)])
    assert [line.split("|")[2].strip() for line in only_older if line.startswith("| toy")] == \
        ["reflective", "local, v1 proposer"]
    assert "(records under no folder yet with the current proposer code)" in "\n".join(only_older)


def test_records_of_superseded_series_sit_beside_the_current_ones_with_each_change_paired_per_seed():
    records = [_record(p, s, f) for s in range(3) for p, f in (("reflective", 0.5), ("local", 0.5 + 0.1 * s))]
    rollout_budget = [_record("local", s, 0.5) for s in range(2)]
    v1 = [_record("local", s, 0.25) for s in range(3)]
    text = markdown(records, superseded={"rollout budget": rollout_budget, "v1 traces": v1})
    rows = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| math")]
    assert rows == ["no search (h0)", "reflective", "local", "local, rollout budget", "local, v1 traces"]
    assert "n=2" in next(line for line in text.splitlines() if line.startswith("| math | local, rollout budget"))
    assert "## What the round budget changed (3 rounds)" in text
    assert "- math: local − local, rollout budget = +5.0" in text and "(seeds +0.0 / +10.0)" in text
    assert "## What the trace view changed (3 rounds)" in text
    assert "- math: local, rollout budget − local, v1 traces = +25.0" in text
    assert "## Decision: the cpu preset's proposer, local against reflective" in text
    assert "## Decision: the cpu preset's proposer, local, rollout budget against reflective" in text
