"""What greedy decoding must give: the trainer's model's argmax ids, teacher-forced on what a
sampler produced. Shared by the sync tests (tests/test_vllm_sync.py, tests/test_paper_models.py),
which check that a sampler's greedy output after a weight sync equals the trainer's model's."""

from __future__ import annotations

import torch


def argmax_continuations(model, requests, completions) -> list[list[int]]:
    """Greedy decoding's ids under `model` (put in eval mode), teacher-forced on what the sampler produced."""
    out = []
    model.eval()
    with torch.inference_mode():
        for request, completion in zip(requests, completions):
            ids = list(request.prompt_ids) + completion.token_ids
            logits = model(torch.tensor([ids])).logits[0]
            out.append(logits[len(request.prompt_ids) - 1: len(ids) - 1].argmax(-1).tolist())
    return out
