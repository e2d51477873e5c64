"""vLLM's CPU set-up as its guide recommends, applied by the vLLM sampler (and so by
`load_policy(..., sampler="vllm")`): threads bound to this process's cores, KV cache
space sized to the machine, tcmalloc and Intel OpenMP preloaded into the engine's
processes only, and KV blocks small enough for episodes to share their system prompt's.
Only that last test starts vLLM (tiny model; marked slow, skipped without vllm)."""

from __future__ import annotations

import os

import pytest

from whalekit.samplers import vllm as vllm_sampler


def test_threads_are_bound_to_every_core_of_this_process_and_the_kv_space_is_set(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5})
    vllm_sampler._configure_environment(tmp_path, 3.4, None, on_gpu=False)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-2,5"
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_a_users_own_cpu_settings_win(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "9")
    vllm_sampler._configure_environment(tmp_path, 3.0, None, on_gpu=False)
    assert (os.environ["VLLM_CPU_OMP_THREADS_BIND"], os.environ["VLLM_CPU_KVCACHE_SPACE"]) == ("0", "9")


def test_kv_cache_space_is_what_the_sequences_need_capped_by_a_quarter_of_free_memory(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text('{"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576, '
                                          '"num_hidden_layers": 30}')
    monkeypatch.setattr(vllm_sampler, "_available_memory_gib", lambda: 100.0)
    # 2 (K, V) x 30 layers x 3 heads x 64 dims x 4 bytes = 46 KiB a token; x 256 x 4096 tokens = 45 GiB
    assert vllm_sampler._kv_cache_gib_for_machine(tmp_path, "float32", 256, 4096) == 25
    assert vllm_sampler._kv_cache_gib_for_machine(tmp_path, "bfloat16", 8, 1024) == 1


def test_preloaded_libraries_reach_the_engine_start_and_leave_this_process_as_it_was(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/libother.so")
    with vllm_sampler._preloading(["/usr/lib/libtcmalloc_minimal.so.4", "/venv/lib/libiomp5.so"]):
        assert os.environ["LD_PRELOAD"].split(":") == ["/usr/lib/libtcmalloc_minimal.so.4", "/venv/lib/libiomp5.so",
                                                       "/opt/libother.so"]
    assert os.environ["LD_PRELOAD"] == "/opt/libother.so"
    monkeypatch.delenv("LD_PRELOAD")
    with vllm_sampler._preloading([]):
        assert "LD_PRELOAD" not in os.environ


def test_the_engine_starts_with_its_own_temporary_folder_and_torchs_compile_cache_where_it_was(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    before = tempfile.gettempdir()
    with vllm_sampler._engine_temp_folder(tmp_path):
        assert os.environ["TMPDIR"] == os.environ["VLLM_RPC_BASE_PATH"] == str(tmp_path)
        pinned = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert pinned.startswith(os.path.join(before, "torchinductor_"))
        assert tempfile.gettempdir() == before, "this process's temporary folder does not move"
    assert "VLLM_RPC_BASE_PATH" not in os.environ and os.environ.get("TMPDIR") != str(tmp_path)
    # importing torch._inductor sets it in this process (torch's own doing), to the same folder
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, pinned)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")
    with vllm_sampler._engine_temp_folder(tmp_path):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/mine", "a user's setting wins"
    with vllm_sampler._engine_temp_folder(None):
        assert "VLLM_RPC_BASE_PATH" not in os.environ and os.environ.get("TMPDIR") != str(tmp_path)


def test_the_preload_list_names_only_libraries_that_exist():
    assert all(os.path.exists(path) for path in vllm_sampler.cpu_preload_libraries())


def test_auto_dtype_is_float32_on_a_cpu_without_native_bf16_and_bf16_where_the_hardware_has_it():
    from whalekit.samplers.vllm import resolve_dtype

    avx2 = "processor : 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
    sapphire = "processor : 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"
    assert resolve_dtype("auto", on_gpu=False, cpuinfo=avx2) == "float32"
    assert resolve_dtype("auto", on_gpu=False, cpuinfo=sapphire) == "bfloat16"
    assert resolve_dtype("auto", on_gpu=True, cpuinfo=avx2) == "bfloat16"
    assert resolve_dtype("float16", on_gpu=False, cpuinfo=avx2) == "float16"  # an explicit choice is kept


@pytest.mark.slow
def test_episodes_sharing_a_system_prompt_shorter_than_128_tokens_reuse_its_kv_blocks(require_vllm):
    """The CPU engine's default 128-token blocks would cache nothing of a ~110-token shared
    prefix; 32-token blocks serve all but its last partial block from the cache."""
    from whalekit.samplers.base import GenerationRequest, SamplingParams
    from whalekit.samplers.models import load_policy
    from whalekit.samplers.vllm import CPU_BLOCK_SIZE

    sampler = load_policy("tiny-random", sampler="vllm", vllm_options={"dtype": "float32"}).sampler
    try:
        shared = list(range(10, 120))  # 110 tokens: three whole 32-token blocks and a partial one
        first = GenerationRequest(shared + [200, 201], 2)
        second = GenerationRequest(shared + [300, 301], 2)
        sampler.generate([first], SamplingParams(temperature=0.0))
        before_sent, before_cached = sampler.prompt_tokens, sampler.cached_prompt_tokens
        sampler.generate([second], SamplingParams(temperature=0.0))
        assert sampler.prompt_tokens - before_sent == len(second.prompt_ids)
        assert sampler.cached_prompt_tokens - before_cached == 3 * CPU_BLOCK_SIZE
    finally:
        sampler.close()
