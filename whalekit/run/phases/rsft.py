"""The weight phase as the driver steps it: one RSFT batch per step (whalekit.weights.rsft's trainer),
its checkpoint saved with the step, the batch record as the `rsft_batch` event; with
`keep_stage_weights`, each weight stage's last checkpoint kept as `stage-weights/stage-NN`. The
`rsft` entry of whalekit.run.phases.weight_updates' WEIGHT_UPDATES.

    phase = RSFTPhase(parts)                   # parts: whalekit.run.parts.RunParts
    record = phase.step(state, stage)          # StepRecord("rsft_batch", ...), or None
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

from whalekit.infra.timing import phase
from whalekit.rollouts.budget import RSFT_PHASE
from whalekit.run.parts import RunParts
from whalekit.run.phases.base import StepRecord
from whalekit.run.schedules import Stage
from whalekit.run.state import RunState
from whalekit.weights.rsft import RSFTTrainer

STAGE_WEIGHTS = "stage-weights"  # <run>/stage-weights/stage-NN: a weight stage's last checkpoint


class RSFTPhase:
    """Online rejection-sampling fine-tuning, one sampled batch per step."""

    kind = "weight"

    def __init__(self, parts: RunParts):
        self.parts = parts
        self.config = parts.config.rsft
        self.trainer = RSFTTrainer(parts.policy, parts.domain, parts.splits.train, self.config, parts.budget,
                                   settings=parts.settings)
        self.checkpoints = parts.run.root / "checkpoints"
        self.kept = parts.run.root / STAGE_WEIGHTS if parts.config.keep_stage_weights else None

    def step(self, state: RunState, stage: Stage) -> StepRecord | None:
        """One RSFT batch of the running weight stage, the batch `RSFTTrainer.train` would take
        next in a stage of these epochs (`stage_batch_problems`); None when none can run."""
        n = self.trainer.stage_batch_problems(None if stage.adaptive else stage.epochs, state.stage_problems)
        if n <= 0:
            return None
        record = self.trainer.step(self.parts.harnesses.runtime(state.accepted_id), n)
        checkpoint = self.checkpoints / f"rsft-{self.trainer.state.batches:05d}"
        with phase("checkpoint"):
            self.trainer.save_checkpoint(checkpoint)
        state.checkpoint = str(checkpoint)
        state.stage_problems += n
        return StepRecord("rsft_batch", asdict(record), signal=record.reward, changed=True)

    def epoch_steps(self, epochs: float) -> int:
        """`epochs` of the training set in RSFT batches (of `rsft.batch_problems` problems)."""
        return self.parts.config.adaptive.weight_batches(epochs, len(self.parts.splits.train),
                                                         self.config.batch_problems)

    def resume(self, state: RunState) -> None:
        if state.checkpoint:
            self.trainer.load_checkpoint(Path(state.checkpoint))
        self.keep_stage_weights(state)  # a kill between the stage's commit and its copy

    def spent(self, state: RunState) -> dict[str, int]:
        return {RSFT_PHASE: self.trainer.state.sampled}

    def steps_done(self, state: RunState) -> int:
        return self.trainer.state.batches

    def stage_signal(self, state: RunState) -> float | None:
        """The training reward's window mean, as the last rsft_batch logged it."""
        window = self.trainer.state.rewards[-self.config.reward_window:]
        return sum(window) / len(window) if window else None

    def committed(self, state: RunState) -> None:
        """Checkpoints other than the committed state's are removed (a finished weight stage's
        kept first, with `keep_stage_weights`)."""
        self.keep_stage_weights(state)
        if self.checkpoints.exists():
            for old in self.checkpoints.iterdir():
                if str(old) != state.checkpoint:
                    shutil.rmtree(old, ignore_errors=True)

    def keep_stage_weights(self, state: RunState) -> None:
        """Copy the committed checkpoint to `stage-weights/stage-NN` when the stage just closed
        (number NN of the run's stages) was a weight stage; idempotent, and a kill mid-copy
        leaves only a `.tmp` folder, which the next call replaces."""
        if self.kept is None or state.stage is not None or not state.history or not state.checkpoint:
            return
        if state.history[-1]["kind"] != self.kind:
            return
        target = self.kept / f"stage-{len(state.history) - 1:02d}"
        if target.exists():
            return
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(state.checkpoint, tmp)
        tmp.rename(target)

    def close(self) -> None:
        self.trainer.close()
