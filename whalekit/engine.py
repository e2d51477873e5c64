"""The batched, lock-step, multi-turn rollout engine.

Every turn it gathers the prompts of all live episodes into one sampler call, then
advances each episode through its harness; tool calls from all episodes run
concurrently. A failure inside one episode (a harness exception, a context overflow)
ends that episode with the error recorded, never the batch.

    trajectories = rollout(domain, [Episode(task, harness, i) for i in range(8)], policy.sampler,
                           RolloutConfig(temperature=1.0, seed=0))
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from whalekit.domains.base import Domain
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, Request, ToolRequest, harness_id, load_harness
from whalekit.harness import Harness
from whalekit.samplers.base import GenerationRequest, Sampler, SamplingParams
from whalekit.types import Task, TaskView, ToolResult, Trajectory, Turn


@dataclass
class RolloutConfig:
    temperature: float = 1.0  # sampling temperature; 0 is greedy
    top_p: float = 1.0  # nucleus sampling mass
    seed: int = 0  # run seed; per-call seeds derive from (seed, step, call)
    step: int = 0  # caller's step counter (training batch, search iteration), for seeds
    max_context_tokens: int = 4096  # prompt + new tokens beyond this ends the episode
    tool_workers: int = 8  # concurrent tool calls (sandboxes are separate processes)
    progress: bool = True  # tqdm bar over finished episodes
    description: str = "rollout"

    def __post_init__(self) -> None:
        if self.max_context_tokens <= 0 or self.tool_workers <= 0:
            raise ValueError("max_context_tokens and tool_workers must be positive")


class EpisodeHandle(Protocol):
    """What the engine needs from a running episode; EpisodeDriver in-process, or a
    proxy to an isolated worker (whalekit.isolation)."""

    def begin(self) -> Request: ...
    def after_generation(self, completion_text: str, prefill: str = "") -> Request: ...
    def after_tools(self, results: list[ToolResult]) -> Request: ...


class HarnessRuntime(Protocol):
    harness_id: str

    def new_episode(self, task: TaskView) -> EpisodeHandle: ...


class InProcessHarness:
    """Runs a trusted harness (h0, tests) in this process. Untrusted candidates go
    through whalekit.isolation instead."""

    def __init__(self, harness: Harness | str, harness_id_: str | None = None):
        if isinstance(harness, str):
            self.source: str | None = harness
            harness = load_harness(harness)
        else:
            self.source = None
        self.harness = harness
        self.harness_id = harness_id_ or (harness_id(self.source) if self.source else type(harness).__name__)

    def new_episode(self, task: TaskView) -> EpisodeHandle:
        return EpisodeDriver(self.harness, task)


@dataclass
class Episode:
    task: Task
    harness: HarnessRuntime
    sample_index: int = 0


@dataclass
class _Live:
    episode: Episode
    trajectory: Trajectory
    handle: EpisodeHandle | None = None
    request: Request | None = None
    started: float = field(default_factory=time.perf_counter)
    last_messages: list[Any] = field(default_factory=list)  # kept for episodes that end in an error


def _derive_seed(*parts: int) -> int:
    value = 0x9E3779B9
    for p in parts:
        value = (value * 1_000_003 + int(p)) % (2**31 - 1)
    return value


def _stable_hash(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def rollout(domain: Domain, episodes: list[Episode], sampler: Sampler, config: RolloutConfig | None = None,
            policy_version: int | None = None) -> list[Trajectory]:
    """Run all episodes to the end; return one verified Trajectory per episode, in order."""
    # -- backends seam (issue 21): a sampler bound to a rollout backend (whalekit.backends, e.g.
    # Ray workers) hands the whole rollout to it; the local path below is unchanged.
    backend = getattr(sampler, "rollout_backend", None)
    if backend is not None:
        return backend.rollout(domain, episodes, config, policy_version)
    # -- end of the backends seam
    config = config or RolloutConfig()
    tokenizer = sampler.tokenizer
    toolbox = domain.toolbox()
    version = sampler.version if policy_version is None else policy_version
    live: list[_Live] = []
    for ep in episodes:
        traj = Trajectory(task_id=ep.task.id, domain=ep.task.domain, harness_id=ep.harness.harness_id,
                          sample_index=ep.sample_index, policy_version=version, subset=ep.task.subset,
                          seed=_derive_seed(config.seed, config.step, _stable_hash(ep.task.id), ep.sample_index))
        item = _Live(ep, traj)
        item.request = _safe(item, lambda item=item: _begin(item))
        live.append(item)

    bar = _progress(len(live), config)
    finished = 0
    call = 0
    with ThreadPoolExecutor(max_workers=config.tool_workers) as pool:
        while True:
            _run_tools(live, toolbox, pool)
            for item in live:
                if isinstance(item.request, Finished) and "wall_s" not in item.trajectory.timings:
                    _finish(domain, item)
                    finished += 1
                    bar.update(1)
            pending = [it for it in live if isinstance(it.request, GenerateRequest)]
            if not pending:
                break
            requests, owners = [], []
            for item in pending:
                assert isinstance(item.request, GenerateRequest)
                item.last_messages = item.request.messages
                prompt = _prompt_ids(tokenizer, item.request)
                limit = item.request.settings.max_new_tokens
                if len(prompt) + limit > config.max_context_tokens:
                    item.request = Finished(None, f"context_overflow: prompt {len(prompt)} + {limit} new tokens "
                                                  f"> {config.max_context_tokens}")
                    continue
                turn_seed = _derive_seed(item.trajectory.seed, len(item.trajectory.turns))
                choices = item.request.settings.choices
                requests.append(GenerationRequest(prompt, limit, list(item.request.settings.stop), turn_seed,
                                                  list(choices) if choices else None))
                owners.append(item)
            if not requests:
                continue
            params = SamplingParams(config.temperature, config.top_p, _derive_seed(config.seed, config.step, call))
            call += 1
            completions = sampler.generate(requests, params)
            for item, req, completion in zip(owners, requests, completions):
                assert isinstance(item.request, GenerateRequest)
                prefill = item.request.settings.prefill
                item.trajectory.turns.append(Turn(req.prompt_ids, completion.token_ids, completion.text,
                                                  completion.finish_reason, prefill))
                handle = item.handle
                item.request = _safe(item, lambda h=handle, c=completion, p=prefill: h.after_generation(c.text, p))
    bar.close()
    return [item.trajectory for item in live]


def _begin(item: _Live) -> Request:
    item.handle = item.episode.harness.new_episode(item.episode.task.view())
    return item.handle.begin()


def _safe(item: _Live, step: Any) -> Request:
    """Advance one episode; any exception ends only that episode, with the reason kept."""
    try:
        request = step()
    except Exception as exc:
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return Finished(None, f"harness_error: {type(exc).__name__}: {exc}\n{''.join(tb[-3:])}".strip())
    if not isinstance(request, (GenerateRequest, ToolRequest, Finished)):
        return Finished(None, f"harness_error: the episode returned {type(request).__name__}")
    return request


def _run_tools(live: list[_Live], toolbox: Any, pool: ThreadPoolExecutor) -> None:
    # Tool results may lead to more tool calls (initial tools, then none): loop until quiet.
    while True:
        waiting = [it for it in live if isinstance(it.request, ToolRequest)]
        if not waiting:
            return
        futures = {}
        for item in waiting:
            view = item.episode.task.view()
            assert isinstance(item.request, ToolRequest)
            futures[id(item)] = [pool.submit(toolbox.run, call, view) for call in item.request.calls]
        for item in waiting:
            assert isinstance(item.request, ToolRequest)
            results = [f.result() for f in futures[id(item)]]
            if item.trajectory.turns:
                item.trajectory.turns[-1].tool_calls.extend(item.request.calls)
                item.trajectory.turns[-1].tool_results.extend(results)
            else:
                item.trajectory.flags.setdefault("initial_tool_results", []).extend(
                    {"name": r.name, "ok": r.ok, "meta": r.meta} for r in results)
            handle = item.handle
            item.request = _safe(item, lambda h=handle, r=results: h.after_tools(r))


def _prompt_ids(tokenizer: Any, request: GenerateRequest) -> list[int]:
    messages = [{"role": m.role, "content": m.content} for m in request.messages]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    ids = list(ids)
    if request.settings.prefill:
        ids += tokenizer.encode(request.settings.prefill, add_special_tokens=False)
    return ids


def _finish(domain: Domain, item: _Live) -> None:
    assert isinstance(item.request, Finished)
    traj = item.trajectory
    traj.final_answer = item.request.answer
    traj.error = item.request.error
    traj.messages = list(item.request.messages or item.last_messages)
    task = item.episode.task
    try:
        verdict = domain.verify(task, traj.final_answer)
        traj.correct, traj.reward = verdict.correct, verdict.reward
        flags = domain.behaviour(traj, task, verdict)
    except Exception as exc:  # a verifier bug must not lose the batch either
        traj.correct, traj.reward = False, 0.0
        traj.error = (traj.error or "") + f" verifier_error: {type(exc).__name__}: {exc}"
        flags = {}
    flags.update({k: v for k, v in traj.flags.items() if k not in flags})
    traj.flags = flags
    traj.timings["wall_s"] = time.perf_counter() - item.started


class _NoBar:
    def update(self, n: int) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, config: RolloutConfig) -> Any:
    if not config.progress or total < 2:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=config.description, unit="ep", leave=False)
