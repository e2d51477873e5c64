"""Batched sampling with transformers' `generate`: left padding, KV cache, one call per
group of requests that share stop strings, chunked to `max_batch_size`.

    sampler = HFSampler(model, tokenizer, max_batch_size=64)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from whalekit.samplers.base import ChoiceTrie, Completion, GenerationRequest, Sampler, SamplingParams, cut_completion


class HFSampler(Sampler):
    def __init__(self, model: Any, tokenizer: Any, max_batch_size: int = 64):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.version = 0
        self._stop_cache: dict[tuple[str, ...], Any] = {}

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[tuple(r.stop)].append(i)
        call = 0
        for indices in groups.values():
            # Similar lengths together waste less padding.
            indices.sort(key=lambda i: len(requests[i].prompt_ids))
            for start in range(0, len(indices), self.max_batch_size):
                chunk = indices[start:start + self.max_batch_size]
                raw = self._generate_chunk([requests[i] for i in chunk], params, seed=params.seed + call)
                call += 1
                for i, ids in zip(chunk, raw):
                    results[i] = cut_completion(ids, requests[i], self.eos_ids, self.tokenizer)
        return [r for r in results if r is not None]

    def _generate_chunk(self, requests: list[GenerationRequest], params: SamplingParams, seed: int) -> list[list[int]]:
        import torch

        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, r in enumerate(requests):
            input_ids[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attention[row, width - len(r.prompt_ids):] = 1
        greedy = params.temperature == 0
        kwargs: dict[str, Any] = dict(
            max_new_tokens=max(r.max_new_tokens for r in requests),
            do_sample=not greedy,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
        )
        seeded = not greedy and all(r.seed is not None for r in requests)
        if seeded:
            # Per-row Gumbel-max sampling: an exact sample from the tempered, top-p-cut
            # distribution whose noise depends only on (row seed, position), so a sample does
            # not change with the batch it was drawn in (exact resume after a kill).
            processor = PerRowSeededSampling([int(r.seed) for r in requests], params.temperature, params.top_p,  # type: ignore[arg-type]
                                             width, params.top_k)
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, logits_processor=[processor])
        elif not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if any(r.choices for r in requests):
            constraint = ChoiceConstraint([ChoiceTrie(r.choices, self.tokenizer, min(self.eos_ids))
                                           if r.choices else None for r in requests], width)
            kwargs["logits_processor"] = [constraint] + list(kwargs.get("logits_processor", []))
        stop = tuple(requests[0].stop)
        if stop:
            kwargs.update(stopping_criteria=self._stop_criteria(stop))
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        return [row[width:].tolist() for row in out]

    def _stop_criteria(self, stop: tuple[str, ...]) -> Any:
        """transformers' stop-string criteria, built once per set of stop strings: building
        it scans the whole vocabulary (about a second), so it must not happen every turn."""
        from transformers import StoppingCriteriaList, StopStringCriteria

        if stop not in self._stop_cache:
            self._stop_cache[stop] = StoppingCriteriaList([StopStringCriteria(self.tokenizer, list(stop))])
        return self._stop_cache[stop]

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        import torch

        own = self.model.state_dict()
        missing = [k for k in own if k not in state_dict and not _is_tied(k, own)]
        if missing:
            raise KeyError(f"load_weights: state dict lacks {len(missing)} tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                if name in own:
                    own[name].copy_(tensor.to(own[name].dtype))
        self.version += 1

    def load_weight_buckets(self, buckets: Iterable[Mapping[str, Any]]) -> None:
        """One weight sync whose tensors arrive in parts (a sharded trainer's buckets,
        `TrainerRanks.state_dict_buckets`), each copied in before the next is asked for. Every
        tensor `load_weights` needs must arrive (KeyError naming the missing ones after the last
        bucket, the model then holding a mix); one version either way."""
        import torch

        own = self.model.state_dict()
        arrived: set[str] = set()
        with torch.no_grad():
            for bucket in buckets:
                for name, tensor in bucket.items():
                    if name in own:
                        own[name].copy_(tensor.to(own[name].dtype))
                        arrived.add(name)
        self.version += 1
        missing = [k for k in own if k not in arrived and not _is_tied(k, own)]
        if missing:
            raise KeyError(f"load_weight_buckets: the buckets lacked {len(missing)} tensors, e.g. {missing[:3]}")


class ChoiceConstraint:
    """A logits processor that leaves each constrained row only the ids that keep its
    reply on a path to one of its choices (then EOS); unconstrained rows pass through."""

    def __init__(self, tries: list[ChoiceTrie | None], prompt_width: int):
        self.tries, self.prompt_width = tries, prompt_width

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row, trie in enumerate(self.tries):
            if trie is None:
                continue
            allowed = trie.allowed(input_ids[row, self.prompt_width:].tolist())
            if allowed is None:
                continue  # finished: generate pads this row
            mask = torch.full_like(scores[row], float("-inf"))
            mask[allowed] = 0.0
            scores[row] = scores[row] + mask
        return scores


class PerRowSeededSampling:
    """A logits processor that turns greedy decoding into seeded sampling, row by row."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float, prompt_width: int, top_k: int = 0):
        self.seeds, self.temperature, self.top_p, self.prompt_width = seeds, temperature, top_p, prompt_width
        self.top_k = top_k  # 0: no top-k cut

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        scores = scores.float() / self.temperature
        if 0 < self.top_k < scores.shape[-1]:  # top-k first, then top-p on what is left (transformers' order)
            kth = torch.topk(scores, self.top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
            cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            drop_sorted = cumulative - torch.softmax(sorted_scores, dim=-1) >= self.top_p  # keep the first past p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            scores = scores.masked_fill(drop, float("-inf"))
        position = input_ids.shape[1] - self.prompt_width
        noise = torch.empty_like(scores)
        for row, seed in enumerate(self.seeds):
            generator = torch.Generator().manual_seed((seed * 1_000_003 + position) % (2**63 - 1))
            noise[row] = torch.rand(scores.shape[-1], generator=generator).clamp_(1e-12, 1.0)
        return scores - torch.log(-torch.log(noise))


def _is_tied(name: str, own: Mapping[str, Any]) -> bool:
    return name == "lm_head.weight" and "model.embed_tokens.weight" in own


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    eos = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos:
        ids.update(eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
