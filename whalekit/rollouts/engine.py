"""The batched multi-turn rollout engine, in two schedules.

Continuous (samplers with `submit`/`poll`, e.g. vLLM): each episode advances on its
own; its next turn is submitted as soon as its previous completion and tool calls are
done, while the sampler keeps decoding the other episodes' turns. Lock-step (any
sampler, e.g. transformers): every turn gathers the prompts of all live episodes into
one `generate` call, so each turn waits for its longest completion. Either way harness
hooks run on this thread (an isolated harness is one pipe, so its calls stay in
order), tool calls run in a thread pool, per-turn seeds derive from the episode and
its turn number alone, and a failure inside one episode (a harness exception, a context
overflow) ends that episode with the error recorded, never the batch.

    trajectories = rollout(domain, [Episode(task, harness, i) for i in range(8)], policy.sampler,
                           RolloutConfig(seed=0))
"""

from __future__ import annotations

import time
import traceback
import zlib
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from whalekit.domains.base import Domain
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, Request, ToolRequest, harness_id, load_harness
from whalekit.harness import Harness
from whalekit.infra.progress import quiet
from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams, TokenizerLike
from whalekit.types import Task, TaskView, ToolResult, Trajectory, Turn


@dataclass
class RolloutConfig:
    sampling: SamplingParams = field(default_factory=SamplingParams)  # temperature (0: greedy), top_p, top_k
    seed: int = 0  # run seed; per-call seeds derive from (seed, step, call)
    step: int = 0  # caller's step counter (training batch, search iteration), for seeds
    max_context_tokens: int = 4096  # prompt + new tokens beyond this ends the episode
    tool_workers: int = 8  # concurrent tool calls (sandboxes are separate processes)
    progress: bool = True  # tqdm bar over finished episodes
    description: str = "rollout"
    scheduling: str = "auto"  # "continuous", "lockstep", or "auto": continuous when the sampler supports it
    max_new_tokens_cap: int | None = None  # mechanics presets: no turn takes more new tokens (see Sampler)
    # The episode's response-token budget (the authors' per-episode assistant budget): a turn
    # asks for at most what its episode has left, and an episode that has used it all ends.
    # None: turns are bounded by the harness's limits alone.
    max_response_tokens: int | None = None

    def __post_init__(self) -> None:
        self.sampling = SamplingParams.of(self.sampling)
        if self.max_context_tokens <= 0 or self.tool_workers <= 0:
            raise ValueError("max_context_tokens and tool_workers must be positive")
        if self.max_new_tokens_cap is not None and self.max_new_tokens_cap <= 0:
            raise ValueError(f"max_new_tokens_cap must be positive or None, got {self.max_new_tokens_cap}")
        if self.max_response_tokens is not None and self.max_response_tokens <= 0:
            raise ValueError(f"max_response_tokens must be positive or None, got {self.max_response_tokens}")
        if self.scheduling not in SCHEDULES:
            raise ValueError(f"scheduling must be one of {', '.join(SCHEDULES)}, got {self.scheduling!r}")


SCHEDULES = ("auto", "continuous", "lockstep")


class RolloutRunner(Protocol):
    """Where whole rollouts can run instead of this process (whalekit.rollouts.backends' RolloutBackend)."""

    def rollout(self, domain: Domain, episodes: list[Episode], config: RolloutConfig | None = None,
                policy_version: int | None = None) -> list[Trajectory]: ...


@dataclass(frozen=True)
class RolloutSettings:
    """What every rollout of one run shares: the driver hands it to each phase and to the test
    evaluation as an argument (it is never set on the sampler). The one way the run's
    generation limits reach a turn (through `apply`, into the RolloutConfig), and where its
    rollouts run.

        settings = RolloutSettings(max_new_tokens_cap=24)
        rollout(domain, episodes, sampler, RolloutConfig(seed=0), settings=settings)
    """

    max_new_tokens_cap: int | None = None  # RunConfig.max_new_tokens_cap: mechanics presets' per-turn cap
    max_response_tokens: int | None = None  # RunConfig.max_response_tokens: the episode's response-token budget
    backend: RolloutRunner | None = None  # runs whole rollouts (Ray workers); None: this process

    def apply(self, config: RolloutConfig) -> RolloutConfig:
        """`config` under the run's limits: the tighter of the two per-turn caps, and the run's
        response budget where `config` sets none (the backend's workers get them in the config)."""
        caps = [c for c in (config.max_new_tokens_cap, self.max_new_tokens_cap) if c is not None]
        cap = min(caps) if caps else None
        if cap != config.max_new_tokens_cap:
            config = replace(config, max_new_tokens_cap=cap)
        if config.max_response_tokens is None and self.max_response_tokens is not None:
            config = replace(config, max_response_tokens=self.max_response_tokens)
        return config


class EpisodeHandle(Protocol):
    """What the engine needs from a running episode; EpisodeDriver in-process, or a
    proxy to an isolated worker (whalekit.sandbox.isolation)."""

    def begin(self) -> Request: ...
    def after_generation(self, completion_text: str, prefill: str = "") -> Request: ...
    def after_tools(self, results: list[ToolResult]) -> Request: ...


class HarnessRuntime(Protocol):
    harness_id: str

    def new_episode(self, task: TaskView) -> EpisodeHandle: ...


class InProcessHarness:
    """Runs a trusted harness (h0, tests) in this process. Untrusted candidates go
    through whalekit.sandbox.isolation instead."""

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
    submitted: bool = False  # continuous schedule: its GenerateRequest is with the sampler
    started: float = field(default_factory=time.perf_counter)
    last_messages: list[Any] = field(default_factory=list)  # kept for episodes that end in an error


def _derive_seed(*parts: int) -> int:
    value = 0x9E3779B9
    for p in parts:
        value = (value * 1_000_003 + int(p)) % (2**31 - 1)
    return value


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def rollout(domain: Domain, episodes: list[Episode], sampler: Sampler, config: RolloutConfig | None = None,
            policy_version: int | None = None, settings: RolloutSettings | None = None) -> list[Trajectory]:
    """Run all episodes to the end; return one verified Trajectory per episode, in order.
    `settings`: the run's generation limits and rollout backend (see RolloutSettings)."""
    config = config or RolloutConfig()
    if settings is not None:  # the run's limits, and where its rollouts run (issue 21: a backend takes them whole)
        config = settings.apply(config)
        if settings.backend is not None:
            return settings.backend.rollout(domain, episodes, config, policy_version)
    supports = bool(getattr(sampler, "continuous", False))  # samplers (and test doubles) without submit/poll
    continuous = config.scheduling == "continuous" or (config.scheduling == "auto" and supports)
    if continuous and not supports:
        raise ValueError(f"{type(sampler).__name__} samples in lock-step only (no submit/poll); "
                         "use scheduling='lockstep' or 'auto'")
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
    with ThreadPoolExecutor(max_workers=config.tool_workers) as pool:
        (_continuous if continuous else _lockstep)(domain, live, sampler, config, pool, bar)
    bar.close()
    return [item.trajectory for item in live]


def _lockstep(domain: Domain, live: list[_Live], sampler: Sampler, config: RolloutConfig, pool: ThreadPoolExecutor,
              bar: Any) -> None:
    toolbox = domain.toolbox()
    call = 0
    while True:
        _run_tools(live, toolbox, pool)
        _finish_done(domain, live, bar)
        pending = [it for it in live if isinstance(it.request, GenerateRequest)]
        if not pending:
            return
        requests, owners = [], []
        for item in pending:
            request = _generation_request(item, sampler.tokenizer, config)
            if request is not None:
                requests.append(request)
                owners.append(item)
        if not requests:
            continue
        params = replace(config.sampling, seed=_derive_seed(config.seed, config.step, call))
        call += 1
        bar.set_postfix_str(f"model call {call}, {len(requests)} sampling")
        completions = sampler.generate(requests, params)
        for item, req, completion in zip(owners, requests, completions):
            _after_generation(item, req, completion)


def _continuous(domain: Domain, live: list[_Live], sampler: Sampler, config: RolloutConfig, pool: ThreadPoolExecutor,
                bar: Any) -> None:
    """Each episode on its own: whatever can advance does, then one sampler step (or,
    with nothing sampling, a wait for the first tool call to return)."""
    toolbox = domain.toolbox()
    sampling: dict[str, tuple[_Live, GenerationRequest]] = {}  # sampler key -> episode, its request
    tools: dict[int, tuple[_Live, list[Future[ToolResult]]]] = {}  # id(episode) -> its running tool calls
    submitted = 0
    while True:
        moved = True
        while moved:  # advance every episode that need not wait, until none can
            moved = False
            for tool_key, (item, futures) in list(tools.items()):
                if all(f.done() for f in futures):
                    del tools[tool_key]
                    _after_tools(item, [f.result() for f in futures])
                    moved = True
            for item in live:
                if isinstance(item.request, ToolRequest) and id(item) not in tools:
                    # the Task itself: the toolbox hands ordinary tools a view, environment tools the reference
                    task = item.episode.task
                    tools[id(item)] = (item, [pool.submit(toolbox.run, c, task) for c in item.request.calls])
                elif isinstance(item.request, GenerateRequest) and not item.submitted:
                    request = _generation_request(item, sampler.tokenizer, config)
                    if request is None:  # context overflow: the episode is finished
                        moved = True
                        continue
                    key = f"{submitted}"
                    submitted += 1
                    params = replace(config.sampling, seed=request.seed or 0)
                    try:
                        sampler.submit(key, request, params)
                    except Exception as exc:  # a request the sampler refuses ends its own episode only
                        item.request = Finished(None, f"sampler_error: {type(exc).__name__}: {exc}")
                        moved = True
                        continue
                    item.submitted = True
                    sampling[key] = (item, request)
            _finish_done(domain, live, bar)
        if sampling:
            for key, completion in sampler.poll():
                item, request = sampling.pop(key)
                item.submitted = False
                _after_generation(item, request, completion)
        elif tools:
            wait([f for _, futures in tools.values() for f in futures], return_when=FIRST_COMPLETED)
        else:
            return


def _generation_request(item: _Live, tokenizer: TokenizerLike, config: RolloutConfig) -> GenerationRequest | None:
    """The sampler request for an episode's next turn, or None when it would overflow
    the context or its response budget is spent (the episode is then finished with that error)."""
    assert isinstance(item.request, GenerateRequest)
    item.last_messages = item.request.messages
    prompt = _prompt_ids(tokenizer, item.request)
    limit = item.request.settings.max_new_tokens
    if config.max_new_tokens_cap is not None:
        limit = min(limit, config.max_new_tokens_cap)
    if config.max_response_tokens is not None:
        used = sum(len(turn.completion_ids) for turn in item.trajectory.turns)
        if used >= config.max_response_tokens:
            item.request = Finished(None, f"response_budget: {used} generated tokens reached the episode's "
                                          f"{config.max_response_tokens}")
            return None
        limit = min(limit, config.max_response_tokens - used)
    if len(prompt) + limit > config.max_context_tokens:
        item.request = Finished(None, f"context_overflow: prompt {len(prompt)} + {limit} new tokens "
                                      f"> {config.max_context_tokens}")
        return None
    turn_seed = _derive_seed(item.trajectory.seed, len(item.trajectory.turns))
    choices = item.request.settings.choices
    return GenerationRequest(prompt, limit, list(item.request.settings.stop), turn_seed,
                             list(choices) if choices else None)


def _after_generation(item: _Live, request: GenerationRequest, completion: Completion) -> None:
    assert isinstance(item.request, GenerateRequest)
    prefill = item.request.settings.prefill
    item.trajectory.turns.append(Turn(request.prompt_ids, completion.token_ids, completion.text,
                                      completion.finish_reason, prefill))
    handle = item.handle
    item.request = _safe(item, lambda h=handle, c=completion, p=prefill: h.after_generation(c.text, p))


def _after_tools(item: _Live, results: list[ToolResult]) -> None:
    assert isinstance(item.request, ToolRequest)
    if item.trajectory.turns:
        item.trajectory.turns[-1].tool_calls.extend(item.request.calls)
        item.trajectory.turns[-1].tool_results.extend(results)
    else:
        item.trajectory.flags.setdefault("initial_tool_results", []).extend(
            {"name": r.name, "ok": r.ok, "meta": r.meta} for r in results)
    handle = item.handle
    item.request = _safe(item, lambda h=handle, r=results: h.after_tools(r))


def _finish_done(domain: Domain, live: list[_Live], bar: Any) -> None:
    for item in live:
        if isinstance(item.request, Finished) and "wall_s" not in item.trajectory.timings:
            _finish(domain, item)
            bar.update(1)


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
            assert isinstance(item.request, ToolRequest)
            # The Task itself: the toolbox hands ordinary tools a view, environment tools the reference.
            task = item.episode.task
            futures[id(item)] = [pool.submit(toolbox.run, call, task) for call in item.request.calls]
        for item in waiting:
            _after_tools(item, [f.result() for f in futures[id(item)]])


def _prompt_ids(tokenizer: TokenizerLike, request: GenerateRequest) -> list[int]:
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
        verdict = domain.verify_trajectory(task, traj)
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
    def set_postfix_str(self, text: str) -> None: ...
    def close(self) -> None: ...


# Finished episodes over all, and elapsed time, but no rate or ETA: in lock-step, episodes
# finish together in bursts, so a rate from the first finisher promises the wrong end.
BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} episodes finished [{elapsed}{postfix}]"


def _progress(total: int, config: RolloutConfig) -> Any:
    if not config.progress or total < 2 or quiet():
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=config.description, unit="ep", leave=False, bar_format=BAR_FORMAT)
