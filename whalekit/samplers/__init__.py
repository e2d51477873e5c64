"""Samplers turn batches of prompt token ids into sampled completion token ids.

    sampler = HFSampler(model, tokenizer)
    [completion] = sampler.generate([GenerationRequest(prompt_ids, 32, ["\\n"])], SamplingParams(0.0))
"""

from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams
from whalekit.samplers.hf import HFSampler

__all__ = ["Completion", "GenerationRequest", "HFSampler", "Sampler", "SamplingParams"]
