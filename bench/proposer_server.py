"""The local proposer's server on this machine: llama.cpp (llama-cpp-python[server] 0.3.36)
serving the proposer's code model through whalekit.search.proposers.local_server, driven by the `openai` SDK.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/proposer_server.py
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/proposer_server.py --model qwen2.5-coder-0.5b

Prints, in one process: the CPU kind; the model's verification (the first call assembles it
from the wheels); the server's start-up time (spawn to the first healthy answer) and memory;
then a ~1,800-token request asking for a Python module (the harness contract's opening, the
search-QA h0_cpu harness and a failure report: the shape of a proposer's request), streamed,
so prompt evaluation (time to the first token) and generation (tokens after it) are timed
apart; then the same request again, which llama-cpp-python's prompt cache answers without
re-evaluating the prompt. Greedy decoding, so both replies are the same tokens.

Figures are for the Q4_K_M GGUF named by the model spec, a portable AVX2 build of llama.cpp
(`make install`'s CMAKE_ARGS: no AVX-512 kernels even on CPUs that have them), n_threads =
the usable cores. Generated tokens are counted as streamed chunks (llama-cpp-python sends one
per token), prompt tokens as the server reports them (`usage.prompt_tokens`).

Measured 2026-12-05 (2-core AMD EPYC, family 25 model 17, flags avx2 avx512f avx512_vnni
avx512_bf16, no AMX: whalekit's CPU kind "AMD EPYC, native bf16 (AVX512-BF16/AMX)"; the CPU
lock held, the server using 1.97 of 2 cores; llama-cpp-python 0.3.36 built for AVX2; n_ctx
8192, n_batch 512, 2 threads, prompt cache off, logits_all off):
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/proposer_server.py --prompt-cache-mb 0
  qwen2.5-coder-1.5b (Q4_K_M, 1.1 GB): start-up 1.62 s, RSS 2,006 MiB after start (917 anonymous:
  the weights repacked for AVX2; 1,088 the mapped file), 2,102 MiB after the requests. 1,838
  prompt tokens in 27.0 s (68.0 tokens/s), then 512 generated in 25.3 s (20.2 tokens/s); the same
  prompt again: first token after 0.01 s, 512 tokens at 21.4 tokens/s, 23.8 s in all (52.3 s cold).
  With --flash-attn: 67.6 prompt and 18.9 generated tokens/s (no gain: off by default). With a
  1 GiB RAM prompt cache (--prompt-cache-mb 1024): the same speeds (69.7 / 22.3), RSS 3,193 MiB.
  qwen2.5-coder-0.5b (--model qwen2.5-coder-0.5b, 0.5 GB): start-up 1.83 s, RSS 712 MiB after
  start, 808 after; 128.7 prompt tokens/s (14.3 s), 33.1 generated tokens/s; repeated prompt 0.01 s.
  An earlier run with llama-cpp-python's server defaults (logits for all positions, a 2 GiB RAM
  cache) and other processes on the cores: 40.0 prompt tokens/s and RSS 8.0 GB after the requests.

Measured 2026-12-07 on the other CPU kind seen (2-core Intel Xeon, flags avx2 avx512f avx512_vnni
avx512_bf16 amx_bf16 amx_int8: whalekit's "Intel(R) Xeon(R) Processor, native bf16 (AVX512-BF16/AMX)";
the same build, options and command, the CPU lock held, the server using 1.97 of 2 cores):
  qwen2.5-coder-1.5b: start-up 1.64 s, RSS 2,005 MiB after start, 2,102 after; 1,838 prompt tokens in
  34.1 s (53.9 tokens/s), 512 generated at 10.9 tokens/s (80.8 s cold); the repeated prompt: first token
  after 0.02 s, 10.5 tokens/s. qwen2.5-coder-0.5b: start-up 1.43 s, RSS 712 MiB after start, 808 after;
  101.3 prompt tokens/s (18.1 s), 20.3 generated tokens/s; the repeated prompt 0.01 s. So this Xeon
  decodes at about half the EPYC's rate with the AVX2 build (its AVX-512 and AMX units are unused by
  it), and a local proposer's candidate costs that much more.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import openai

from whalekit.infra.cpu_info import cpu_kind, read_cpuinfo
from whalekit.search.proposers.local_models import DEFAULT_PROPOSER_MODEL, PROPOSER_MODELS, proposer_model_path
from whalekit.search.proposers.local_server import HOST, ServerOptions, start_llama_server, usable_cores

ROOT = Path(__file__).resolve().parents[1]
FAILURE_REPORT = """\
Failure report for the parent harness on the search split (48 problems, 8 samples each): mean@8 0.21.
- 143 of 384 episodes ended at max_turns without a final answer: the model kept issuing near-identical
  <search> queries (e.g. "who founded the company that made X" three times in a row).
- 61 episodes gave an answer that was a full sentence instead of a short entity; the verifier's exact
  match after normalisation rejected them although the entity was inside the sentence.
- 22 format errors: a <search> tag was opened and never closed before the token cap.
- When the first search's results did not contain the answer, the model rarely reformulated the query.
"""
INSTRUCTION = """\
Write an improved version of the harness above as one complete Python module. Keep the class
structure and the hooks' signatures. Address the failure report: stop repeated queries, shorten
answers to the entity, and recover from unclosed tags. Start with a one-line comment giving your
hypothesis, then the module in a single ```python block."""


def flags() -> str:
    info = read_cpuinfo() or ""
    line = next((x for x in info.splitlines() if x.startswith("flags")), "")
    have = set(line.split(":", 1)[-1].split())
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    return " ".join(f for f in wanted if f in have) or "none of " + " ".join(wanted)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def prompt_text(target_tokens: int, count: Callable[[str], int]) -> str:
    """The contract's opening, the harness and the report, the contract trimmed until the
    whole message is about `target_tokens` by the server's own tokenizer (`count(text)`)."""
    contract = (ROOT / "whalekit" / "harness.py").read_text()
    harness = (ROOT / "whalekit" / "domains" / "searchqa" / "harnesses" / "h0_cpu.py").read_text()

    def build(n_chars: int) -> str:
        return (f"You improve agent harnesses. The harness contract (excerpt):\n\n{contract[:n_chars]}\n\n"
                f"The current harness (search QA):\n\n```python\n{harness}```\n\n{FAILURE_REPORT}\n{INSTRUCTION}")

    n_chars = len(contract)
    for _ in range(6):
        tokens = count(build(n_chars))
        if abs(tokens - target_tokens) < 40:
            break
        n_chars = max(0, min(len(contract), n_chars + int((target_tokens - tokens) * 3.2)))
    return build(n_chars)


@dataclass(frozen=True)
class Timed:
    ttft_s: float  # request sent to the first content chunk: the prompt's evaluation
    gen_s: float  # first chunk to the end of the stream
    gen_tokens: int  # content chunks: one per generated token
    total_s: float
    text: str
    finish: str | None


def timed_stream(client: openai.OpenAI, model: str, messages: list[dict[str, str]], max_tokens: int) -> Timed:
    start = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    finish = None
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                            temperature=0.0, stream=True)
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            first = first or time.perf_counter()
            pieces.append(choice.delta.content)
        finish = choice.finish_reason or finish
    end = time.perf_counter()
    first = first or end
    return Timed(first - start, end - first, len(pieces), end - start, "".join(pieces), finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_PROPOSER_MODEL, choices=list(PROPOSER_MODELS))
    parser.add_argument("--prompt-tokens", type=int, default=1800)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompt-cache-mb", type=int, default=None,
                        help="llama-cpp-python's RAM prompt cache (0: off); default: ServerOptions'")
    parser.add_argument("--flash-attn", action="store_true")
    args = parser.parse_args()

    print(f"CPU: {cpu_kind()}; flags: {flags()}; usable cores: {usable_cores()}")
    start = time.perf_counter()
    path = proposer_model_path(args.model)
    print(f"model {args.model}: {path} ({path.stat().st_size:,} bytes), verified/located in "
          f"{time.perf_counter() - start:.2f} s")
    options = ServerOptions(n_ctx=args.n_ctx, n_threads=args.threads, model_alias=args.model,
                            flash_attn=args.flash_attn)
    if args.prompt_cache_mb is not None:
        options = dataclasses.replace(options, prompt_cache_bytes=args.prompt_cache_mb << 20)
    print(f"server options: {options}")
    with tempfile.TemporaryDirectory(prefix="proposer-bench-") as run_dir, \
            start_llama_server(path, Path(run_dir), options) as server:
        mem = server.memory()
        print(f"server start-up {server.startup_s:.2f} s (spawn to first healthy answer); "
              f"memory after start: RSS {mem.get('rss', 0) / 2**20:,.0f} MiB "
              f"(anonymous {mem.get('anon', 0) / 2**20:,.0f}, file-backed {mem.get('file', 0) / 2**20:,.0f})")
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=1800)
        warm = timed_stream(client, args.model, [{"role": "user", "content": "Say OK."}], 4)
        print(f"first request (tiny, warms the engine): {warm.total_s:.2f} s")

        def count(text: str) -> int:  # llama-cpp-python's own endpoint, outside the OpenAI API
            request = urllib.request.Request(f"http://{HOST}:{server.port}/extras/tokenize/count",
                                             data=json.dumps({"input": text}).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(json.loads(response.read())["count"])

        messages = [{"role": "user", "content": prompt_text(args.prompt_tokens, count)}]
        runs: list[Timed] = []
        prompt_tokens = 0
        threads = options.n_threads or usable_cores()
        for label in ("cold prompt", "same prompt again (prompt cache)"):
            cpu_before = cpu_seconds(server.pid)
            result = timed_stream(client, args.model, messages, args.max_tokens)
            cpu_used = cpu_seconds(server.pid) - cpu_before
            runs.append(result)
            if not prompt_tokens:  # asked after the cold run, so that run found nothing cached
                usage = client.chat.completions.create(model=args.model, messages=messages, max_tokens=1,
                                                       temperature=0.0).usage
                prompt_tokens = usage.prompt_tokens if usage else 0
            print(f"{label}: {prompt_tokens} prompt tokens in {result.ttft_s:.2f} s to the first token "
                  f"({prompt_tokens / result.ttft_s:.1f} prompt tokens/s); {result.gen_tokens} generated tokens "
                  f"in {result.gen_s:.2f} s ({(result.gen_tokens - 1) / max(result.gen_s, 1e-9):.1f} tokens/s "
                  f"after the first); total {result.total_s:.2f} s, finish {result.finish}; the server used "
                  f"{cpu_used:.1f} CPU s = {cpu_used / result.total_s:.2f} cores (of {threads} threads; fewer: "
                  f"other processes took cores); load average {load_average()}")
        mem = server.memory()
        print(f"memory after the requests: RSS {mem.get('rss', 0) / 2**20:,.0f} MiB, peak "
              f"{mem.get('peak', 0) / 2**20:,.0f} MiB (anonymous {mem.get('anon', 0) / 2**20:,.0f}, "
              f"file-backed {mem.get('file', 0) / 2**20:,.0f})")
        lines = runs[0].text.count("\n") + 1
        common = next((i for i, (x, y) in enumerate(zip(runs[0].text, runs[1].text)) if x != y),
                      min(len(runs[0].text), len(runs[1].text)))
        print(f"replies identical: {runs[0].text == runs[1].text} (first {common} characters the same: the cached "
              f"run evaluates the prompt's last token alone, not in a batch, so greedy decoding may part at a near "
              f"tie); reply: {lines} lines, first 400 characters:\n"
              f"{runs[0].text[:400]}")
        pid = server.pid
    print(f"server {pid} closed: exit code {server.process.returncode}")


if __name__ == "__main__":
    main()
