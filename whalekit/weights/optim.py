"""AdamW for bfloat16 weights, so full fine-tuning of a 2B/4B model fits beside vLLM on one GPU.

Plain AdamW on bf16 weights rounds each update to the nearest bf16 value, and an update
smaller than half a bf16 step (about 6e-5 for a weight of 0.02, against lr 1e-5) is lost
every time: the model silently stops learning. Here the moments are float32, the update
is computed in float32 and written back with stochastic rounding, so it lands in
expectation. Memory per parameter: 2 (weight) + 2 (grad) + 8 (moments) bytes, against 16
for float32 weights with float32 AdamW.

    optimizer = BF16AdamW(params, lr=1e-5, seed=0)
"""

from __future__ import annotations

from typing import Any

import torch


def stochastic_round_bf16(value: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """float32 -> bfloat16, rounding up or down with probability proportional to the distance:
    add uniform noise below the 16 mantissa bits bf16 drops, then truncate them."""
    bits = value.float().contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, device=value.device, generator=generator)
    return ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)


class BF16AdamW(torch.optim.Optimizer):
    """Decoupled-weight-decay Adam with float32 moments; bf16 parameters are written with
    stochastic rounding seeded by (seed, step, parameter index), so a run resumed from a
    checkpoint repeats the same noise. Other parameters (e.g. float32 LoRA adapters over a
    bf16 base) get the exact update."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, seed: int = 0):
        if lr <= 0:
            raise ValueError("lr must be positive")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.seed = seed

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t, grad = state["step"], p.grad.float()
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
                value = p.float().mul_(1 - group["lr"] * group["weight_decay"])
                value.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1 ** t))
                if p.dtype == torch.bfloat16:
                    generator = torch.Generator(p.device).manual_seed(self.seed * 1_000_003 + t * 10_007 + index)
                    p.copy_(stochastic_round_bf16(value, generator))
                else:
                    p.copy_(value)
        return loss


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The RSFT trainer's learning-rate schedule: linear warm-up over `warmup_steps` optimiser
    steps, then constant (WHALE calls the trainer in short stages). One rule for the in-process
    trainer and the sharded ranks (whalekit.weights.distributed.trainer_ranks)."""
    warmup = max(1, warmup_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
