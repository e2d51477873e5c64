"""Data-parallel RSFT steps (`whalekit.weights.distributed.data_parallel`): 2 gloo ranks, each training on its share
of a global mini-batch and summing gradients, end the step with the weights 1 rank gets from
the whole mini-batch (full fine-tuning and LoRA, AdamW as the trainer builds it): the summed
gradients to 1e-5, every weight to within AdamW's rounding bound (two steps of lr, where a
near-zero gradient's sign flips); the loss they report is the global mini-batch's."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
from training_sequences import sequences

LR = 1e-3
# The ranks' summed gradients differ from one rank's only in float32 summation order: 1e-5 of each
# tensor's norm. The weights after AdamW's first step (lr x g / |g| per element) may differ by up to
# two steps in an element whose gradient is near 0, where that rounding flips its sign.


def model_and_optimizer(lora: bool):
    from whalekit.samplers.model_files import resolve_model_dir
    from whalekit.samplers.models import load_model

    torch.manual_seed(0)
    model = load_model(resolve_model_dir("tiny-random"))
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=LR, weight_decay=0.01)


def trained_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def gradients(model) -> dict[str, torch.Tensor]:
    """What the step used: after it, `.grad` still holds the summed, clipped gradients."""
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def rank_main(rank: int, world: int, init_file: str, lora: bool, out_file: str) -> None:
    import torch.distributed as dist

    from whalekit.weights.distributed.data_parallel import data_parallel_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, optimizer = model_and_optimizer(lora)
        loss, tokens = data_parallel_step(model, optimizer, sequences(), micro_batch=2, pad_id=0)
        if rank == 0:  # a file, not a queue: tensors sent through one die with their process
            torch.save((loss, tokens, trained_weights(model), gradients(model)), out_file)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def one_rank_step(lora: bool) -> tuple[float, int, dict[str, torch.Tensor], dict[str, torch.Tensor],
                                      dict[str, torch.Tensor]]:
    from whalekit.weights.rsft_loss import token_normalised_loss

    model, optimizer = model_and_optimizer(lora)
    before = trained_weights(model)
    loss, tokens = token_normalised_loss(model, sequences(), 2, 0)
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    return loss, tokens, before, trained_weights(model), gradients(model)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_two_gloo_ranks_update_the_weights_as_one_rank_does(lora, tmp_path):
    context = mp.get_context("spawn")
    out_file = tmp_path / "rank0.pt"
    processes = [context.Process(target=rank_main, args=(rank, 2, str(tmp_path / "init"), lora, str(out_file)))
                 for rank in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        if process.is_alive():
            process.kill()
    assert all(process.exitcode == 0 for process in processes)
    loss, tokens, weights, grads = torch.load(out_file)
    reference_loss, reference_tokens, before, reference, reference_grads = one_rank_step(lora)
    assert tokens == reference_tokens and loss == pytest.approx(reference_loss, rel=1e-6)
    assert weights.keys() == reference.keys() == grads.keys()
    changed = 0
    for name, tensor in weights.items():
        assert (grads[name] - reference_grads[name]).norm() <= 1e-5 * reference_grads[name].norm() + 1e-12, name
        changed += bool((reference[name] - before[name]).norm() > 0)
        assert (tensor - reference[name]).abs().max() <= 2.0001 * LR, name
    assert changed == len(reference)  # every trained tensor moved


def test_a_rank_share_takes_every_world_th_sequence():
    from whalekit.weights.distributed.data_parallel import rank_share

    batch = list(range(7))
    assert [rank_share(batch, r, 2) for r in range(2)] == [[0, 2, 4, 6], [1, 3, 5]]
    with pytest.raises(ValueError):
        rank_share(batch, 2, 2)
