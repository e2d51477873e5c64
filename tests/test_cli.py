"""The command line as a user meets it: every verb, and one-line errors (exit status 2,
no traceback) for what was typed wrong."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import yaml

from whalekit.cli import harness as cli_harness
from whalekit.cli import main as cli
from whalekit.domains.base import get_domain
from whalekit.infra.runs import RunDir
from whalekit.run.driver import resolve_config


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_unknown_set_key_is_one_line_listing_the_valid_keys(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--domain", "toy", "--preset", "smoke", "--runs-root", str(tmp_path),
                             "--set", "bugdet=64")
    line = one_line_error(err)
    assert code == 2 and out == ""
    assert "bugdet" in line and "budget" in line and "rsft" in line and "eval_k" in line
    assert not (tmp_path / "smoke").exists()  # nothing ran


def test_an_unknown_nested_key_lists_the_keys_of_its_section(capsys):
    code, _, err = run_cli(capsys, "run", "--domain", "toy", "--preset", "smoke", "--set", "rsft.lr=1e-4")
    line = one_line_error(err)
    assert code == 2 and "rsft.lr" in line and "rsft.learning_rate" in line and "rsft.lora_r" in line


@pytest.mark.parametrize("pair, words", [
    ("budget=lots", ["budget", "expected int"]),                   # wrong type, caught before the config
    ("budget=-4", ["budget", "positive"]),                         # RunConfig.__post_init__
    ("rsft.learning_rate=0", ["learning_rate"]),                   # RSFTConfig.__post_init__
    ("rsft=3", ["rsft", "section"]),
    ("isolation=off", ["isolation"]),
    ("seed=3", ["--seed"]),                                        # has its own flag
    ("budget", ["KEY=VALUE"]),
])
def test_bad_values_are_one_line_errors_with_status_2(capsys, pair, words):
    code, _, err = run_cli(capsys, "run", "--domain", "toy", "--preset", "smoke", "--set", pair, "--print-config")
    line = one_line_error(err)
    assert code == 2 and all(word in line for word in words), line


def test_an_unknown_preset_or_domain_is_a_one_line_error(capsys):
    assert run_cli(capsys, "run", "--domain", "toy", "--preset", "nosuch", "--print-config")[0] == 2
    code, _, err = run_cli(capsys, "run", "--domain", "chequers", "--preset", "smoke", "--print-config")
    assert code == 2 and "chequers" in one_line_error(err)


def test_print_config_prints_the_resolved_config_as_yaml_and_runs_nothing(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--domain", "toy", "--preset", "smoke", "--method", "fst",
                             "--schedule", "1,2", "--seed", "3", "--runs-root", str(tmp_path),
                             "--set", "budget=64", "--set", "rsft.learning_rate=1e-4", "--isolation", "none",
                             "--print-config")
    assert code == 0 and err == ""
    printed = yaml.safe_load(out)
    expected = resolve_config("smoke", "toy", "fst", "1,2", 3, runs_root=str(tmp_path), budget=64,
                              rsft={"learning_rate": 1e-4}, isolation="none")
    assert printed == json.loads(json.dumps(expected.to_json()))
    assert printed["budget"]["rollouts"] == 64 and printed["rsft"]["learning_rate"] == 1e-4
    assert printed["isolation"] == "none"
    assert printed["schedule"] == [1.0, 2] and printed["model"] == "tiny-random"
    assert not any(tmp_path.iterdir())


def _fake_run(root, finished: bool):
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"domain": "toy", "method": "whale", "schedule": [0.5, 1],
                                                  "seed": 0, "eval_k": 2}))
    if finished:
        (root / "events.jsonl").write_text(json.dumps({
            "event": "run_end", "best_mean_at_k": 0.25, "best_at_rollouts": 32, "final_mean_at_k": 0.125,
            "rollouts": 96, "budget": 96, "wall_s": 3}) + "\n")
    return root


def test_report_refuses_paths_that_are_not_runs(capsys, tmp_path):
    run = _fake_run(tmp_path / "smoke" / "toy" / "whale-0.5,1-s0", finished=True)
    (tmp_path / "empty").mkdir()
    code, out, err = run_cli(capsys, "report", str(run), str(tmp_path / "empty"), str(tmp_path / "missing"))
    line = one_line_error(err)
    assert code == 2 and out == "" and "empty" in line and "missing" in line and "not a run" in line


def test_report_summarises_runs_and_the_runs_below_a_folder(capsys, tmp_path):
    run = _fake_run(tmp_path / "smoke" / "toy" / "whale-0.5,1-s0", finished=True)
    _fake_run(run / "checkpoints" / "step-1", finished=False)  # a model's config.json, not a run's
    (run / "checkpoints" / "step-1" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    _fake_run(tmp_path / "smoke" / "toy" / "whale-1,1-s0", finished=False)
    code, out, _ = run_cli(capsys, "report", str(tmp_path / "smoke"))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2
    assert "best test mean@2 25.0% at 32 rollouts" in lines[0] and lines[1].endswith("not finished")


def _toy_h0(tmp_path):
    path = tmp_path / "h0.py"
    path.write_text(get_domain("toy").initial_harness_source())
    return path


def test_validate_passes_h0_and_prints_what_a_proposer_would_be_told(capsys, tmp_path):
    code, out, err = run_cli(capsys, "validate", str(_toy_h0(tmp_path)), "--domain", "toy", "--preset", "smoke")
    assert code == 0, err
    assert "static check passed" in out and "dry run passed" in out


def test_validate_rejects_a_forbidden_import_with_the_static_reason(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n" + get_domain("toy").initial_harness_source())
    code, out, _ = run_cli(capsys, "validate", str(bad), "--domain", "toy", "--preset", "smoke")
    assert code == 1 and "rejected by the static check" in out and "os" in out


def test_validate_rejects_a_harness_whose_dry_run_fails(capsys, tmp_path):
    source = get_domain("toy").initial_harness_source()
    crashing = source.replace('return "You are a careful calculator.', 'raise RuntimeError("kaput")  # "', 1)
    assert crashing != source
    path = tmp_path / "crash.py"
    path.write_text(crashing)
    code, out, _ = run_cli(capsys, "validate", str(path), "--domain", "toy", "--preset", "smoke")
    assert code == 1 and "static check passed" in out and "dry run failed" in out and "kaput" in out


def test_validate_a_missing_file_is_a_one_line_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "nope.py"), "--domain", "toy")
    assert code == 2 and "nope.py" in one_line_error(err)


def test_eval_scores_a_harness_file_and_writes_an_html_trace(capsys, tmp_path, monkeypatch, tiny_policy):
    monkeypatch.setattr(cli_harness, "load_policy_for", lambda config: tiny_policy)
    trace = tmp_path / "trace.html"
    code, out, err = run_cli(capsys, "eval", "--domain", "toy", "--harness", str(_toy_h0(tmp_path)),
                             "--preset", "smoke", "--split", "test", "--samples", "2", "--set", "n_test=2",
                             "--trace", str(trace))
    assert code == 0, err
    assert "test split, 2 problems x 2 samples" in out and "mean@2: " in out
    assert "behaviour (mean per sample): answered" in out and "turns" in out
    page = trace.read_text()
    assert page.startswith("<!doctype html>") and page.count("class='wk-trace'") == 4 and "mean@2" in page


def test_eval_default_trace_lands_under_runs_root(capsys, tmp_path, monkeypatch, tiny_policy):
    monkeypatch.setattr(cli_harness, "load_policy_for", lambda config: tiny_policy)
    code, out, err = run_cli(capsys, "eval", "--domain", "toy", "--harness", str(_toy_h0(tmp_path)),
                             "--preset", "smoke", "--samples", "1", "--set", "n_search=2",
                             "--runs-root", str(tmp_path / "runs"))
    assert code == 0, err
    assert (tmp_path / "runs" / "eval" / "toy" / "h0-search.html").is_file()
    assert "search split, 2 problems x 1 samples" in out


def test_eval_refuses_a_bad_sample_count(capsys, tmp_path):
    code, _, err = run_cli(capsys, "eval", "--domain", "toy", "--harness", str(_toy_h0(tmp_path)),
                           "--preset", "smoke", "--samples", "0")
    assert code == 2 and "--samples" in one_line_error(err)


def test_version_and_help_name_every_choice(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("whalekit ")
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(word in text for word in ("math", "searchqa", "chess", "toy", "weight_only", "harness_only",
                                         "stagewise_reverse", "adaptive", "RUNS_ROOT", "the run's seed"))
    assert run_cli_exit(capsys, "run", "--domain", "toy", "--method", "nosuch") == 2


def run_cli_exit(capsys, *argv: str) -> int:
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    capsys.readouterr()
    return int(done.value.code or 0)


def test_a_stale_run_directory_is_one_line_naming_the_change_and_exit_2(capsys, tmp_path):
    # a run directory holding another configuration's run, at the path this command would use
    config = resolve_config("smoke", domain="toy", method="weight_only", seed=0, runs_root=str(tmp_path))
    other = resolve_config("smoke", domain="toy", method="weight_only", seed=0, runs_root=str(tmp_path), budget=48)
    assert other.run_dir == config.run_dir
    RunDir(config.run_dir).write_config(dataclasses.asdict(other))
    code, out, err = run_cli(capsys, "run", "--domain", "toy", "--method", "weight_only", "--preset", "smoke",
                             "--runs-root", str(tmp_path))
    line = one_line_error(err)
    assert code == 2 and out == "" and "budget" in line


def test_the_reproduction_and_reports_are_subcommands_of_the_one_command(capsys, tmp_path):
    assert cli.main(["reproduce", "--preset", "smoke", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "02_domain_run math/whale-" in out and "runs recorded" in err
    for name in cli.PROGRAMS:
        with pytest.raises(SystemExit) as done:
            cli.main([name, "--help"])
        assert done.value.code == 0 and "usage:" in capsys.readouterr().out, name


def test_a_run_starts_from_a_harness_file_of_your_own(capsys, tmp_path):
    mine = tmp_path / "my_h0.py"
    source = get_domain("toy").initial_harness_source().replace("Reply with the number only.",
                                                                 "Answer with one integer.")
    mine.write_text(source)
    code, out, err = run_cli(capsys, "run", "--domain", "toy", "--method", "harness_only", "--preset", "smoke",
                             "--runs-root", str(tmp_path / "runs"), "--set", f"initial_harness={mine}")
    assert code == 0, err
    (run,) = (tmp_path / "runs" / "smoke" / "toy").iterdir()
    assert run.name == "harness_only-s0-my_h0"  # the file's name tells the run apart from h0's
    config = json.loads((run / "config.json").read_text())
    assert config["initial_harness"] == str(mine)
    assert config["provenance"]["initial_harness_sha256"] == hashlib.sha256(source.encode()).hexdigest()
    first = json.loads((run / "test" / "eval-000.jsonl").read_text().splitlines()[0])
    assert "Answer with one integer." in json.dumps(first)  # its prompts are the file's


@pytest.mark.parametrize("content, words", [(None, "no such harness file"),
                                            ("import os\n", "not a valid starting harness")])
def test_a_missing_or_invalid_harness_file_is_one_line_and_exit_2(capsys, tmp_path, content, words):
    mine = tmp_path / "bad_h0.py"
    if content is not None:
        mine.write_text(content)
    code, out, err = run_cli(capsys, "run", "--domain", "toy", "--method", "harness_only", "--preset", "smoke",
                             "--runs-root", str(tmp_path / "runs"), "--set", f"initial_harness={mine}")
    line = one_line_error(err)
    assert code == 2 and str(mine) in line and words in line
