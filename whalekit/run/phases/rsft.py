"""The weight phase as the driver steps it: one RSFT batch per step (whalekit.weights.rsft's trainer),
its checkpoint saved with the step, the batch record as the `rsft_batch` event. The
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


class RSFTPhase:
    """Online rejection-sampling fine-tuning, one sampled batch per step."""

    kind = "weight"

    def __init__(self, parts: RunParts):
        self.parts = parts
        self.config = parts.config.rsft
        self.trainer = RSFTTrainer(parts.policy, parts.domain, parts.splits.train, self.config, parts.budget,
                                   settings=parts.settings)
        self.checkpoints = parts.run.root / "checkpoints"

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

    def spent(self, state: RunState) -> dict[str, int]:
        return {RSFT_PHASE: self.trainer.state.sampled}

    def steps_done(self, state: RunState) -> int:
        return self.trainer.state.batches

    def stage_signal(self, state: RunState) -> float | None:
        """The training reward's window mean, as the last rsft_batch logged it."""
        window = self.trainer.state.rewards[-self.config.reward_window:]
        return sum(window) / len(window) if window else None

    def committed(self, state: RunState) -> None:
        """Checkpoints other than the committed state's are removed."""
        if self.checkpoints.exists():
            for old in self.checkpoints.iterdir():
                if str(old) != state.checkpoint:
                    shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        self.trainer.close()
