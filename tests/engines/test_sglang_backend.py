"""attnkit inside SGLang (CPU): the registry, ``--attention-backend attnkit``, the factory, and
forwards on hand-built forward batches over SGLang's own KV pools, checked against SGLang's own
torch_native backend on the same batches. The SGLang tier of .ci/run runs this file."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
import torch
import transformers

from attnkit.errors import AttnkitError

PAGE = 4
FP32_TOLERANCE = 1e-5


def hf_config(family: str, **extra):
    common = dict(vocab_size=64, hidden_size=128, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  max_position_embeddings=256)
    if family == "mistral-window":
        return transformers.MistralConfig(**common, sliding_window=6, **extra)
    return transformers.LlamaConfig(**common, **extra)


def runner(config, **overrides):
    """What SGLang's ModelRunner hands a backend factory, with SGLang's own pools."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    kv = MHATokenToKVPool(size=128, page_size=PAGE, dtype=torch.float32, head_num=2, head_dim=32,
                          layer_num=1, device="cpu", enable_memory_saver=False)
    rt = ReqToTokenPool(size=4, max_context_len=64, device="cpu", enable_memory_saver=False)
    base = dict(model_config=SimpleNamespace(hf_config=config, model_path="tiny-" + config.model_type),
                dtype=torch.float32, kv_cache_dtype=torch.float32, page_size=PAGE, tp_size=1,
                device="cpu", use_mla_backend=False, req_to_token_pool=rt, token_to_kv_pool=kv)
    return SimpleNamespace(**{**base, **overrides})


@pytest.fixture(scope="module")
def registered():
    from attnkit.integrations.sglang import register

    return register()


def test_registry_and_server_args(registered):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.server_args import ServerArgs

    from attnkit.integrations.sglang import create_backend, register

    assert registered == "attnkit" and ATTENTION_BACKENDS["attnkit"] is create_backend
    assert register() == "attnkit"          # idempotent
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "m", "--attention-backend", "attnkit"])
    assert args.attention_backend == "attnkit"


def test_factory_builds_attnkits_planned_backend(registered, caplog):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from attnkit.integrations.sglang.backend import AttnkitSglangBackend

    with caplog.at_level("INFO", logger="sglang.attnkit"):
        backend = ATTENTION_BACKENDS["attnkit"](runner(hf_config("llama-gqa")))
    assert isinstance(backend, AttnkitSglangBackend)
    assert backend.plan.plan.decode_backend == "sdpa" and backend.plan.page_size == PAGE
    assert [r.message for r in caplog.records if "attnkit plan for" in r.message]


@pytest.mark.parametrize("change, needle", [
    ({"use_mla_backend": True}, "MLA"),
    ({"kv_cache_dtype": torch.float8_e4m3fn}, "KV pool"),
])
def test_sglangs_own_checks_are_attnkits_coded_reasons(registered, change, needle):
    from attnkit.integrations.sglang import create_backend

    with pytest.raises(AttnkitError) as err:
        create_backend(runner(hf_config("llama-gqa"), **change))
    assert err.value.code == "AK496" and needle in str(err.value)


def test_dual_chunk_model_is_refused_with_a_code(registered):
    from attnkit.integrations.sglang import create_backend

    config = hf_config("llama-gqa")
    config.dual_chunk_attention_config = {"chunk_size": 32, "local_size": 8}
    with pytest.raises(AttnkitError) as err:
        create_backend(runner(config))
    assert err.value.code == "AK496" and "dual chunk" in str(err.value)


def test_planner_refusal_is_the_planners_code(registered, monkeypatch):
    import attnkit
    from attnkit.integrations.sglang import create_backend

    config = hf_config("llama-gqa")
    with pytest.raises(AttnkitError) as planned:
        attnkit.plan(config.to_dict(), "cpu", {"attention_backend": "triton", "dtype": "fp32",
                                               "page_size": PAGE}, strict=True)
    monkeypatch.setenv("ATTNKIT_ATTENTION_BACKEND", "triton")
    with pytest.raises(AttnkitError) as err:
        create_backend(runner(config))
    assert err.value.code == planned.value.code


def _steps(config):
    """Three steps over two requests: prompts of 9 and 5 tokens, a decode of both, then 3 more
    tokens for the first (an extend over its 10 cached ones). Pages are scattered."""
    pages = {0: [5, 2, 9, 11], 1: [7, 3]}
    slot = lambda r, pos: pages[r][pos // PAGE] * PAGE + pos % PAGE   # noqa: E731
    return pages, slot, [("extend", {0: (0, 9), 1: (0, 5)}), ("decode", {0: (9, 1), 1: (5, 1)}),
                         ("extend", {0: (10, 3)})]


def _run(backend, layer, run, config, seed=0) -> list[torch.Tensor]:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    gen = torch.Generator().manual_seed(seed)
    pages, slot, steps = _steps(config)
    rt = run.req_to_token_pool.req_to_token
    for r, row in pages.items():
        for pos in range(len(row) * PAGE):
            rt[r, pos] = slot(r, pos)
    outs = []
    for mode, reqs in steps:
        ids = sorted(reqs)
        seq = [reqs[r][0] + reqs[r][1] for r in ids]
        locs = [slot(r, p) for r in ids for p in range(reqs[r][0], reqs[r][0] + reqs[r][1])]
        t = len(locs)
        fb = ForwardBatch(
            forward_mode=ForwardMode.EXTEND if mode == "extend" else ForwardMode.DECODE,
            batch_size=len(ids), input_ids=torch.zeros(t, dtype=torch.int64),
            req_pool_indices=torch.tensor(ids), seq_lens=torch.tensor(seq),
            out_cache_loc=torch.tensor(locs), seq_lens_sum=sum(seq),
            seq_lens_cpu=torch.tensor(seq))
        if mode == "extend":
            fb.extend_prefix_lens = torch.tensor([reqs[r][0] for r in ids])
            fb.extend_seq_lens = torch.tensor([reqs[r][1] for r in ids])
            fb.extend_prefix_lens_cpu = [reqs[r][0] for r in ids]
            fb.extend_seq_lens_cpu = [reqs[r][1] for r in ids]
        q = torch.randn(t, 4 * 32, generator=gen)
        k = torch.randn(t, 2, 32, generator=gen)
        v = torch.randn(t, 2, 32, generator=gen)
        backend.init_forward_metadata(fb)
        outs.append(backend.forward(q, k, v, layer, fb).reshape(t, -1))
    return outs


def _compare(family, monkeypatch=None) -> float:
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.layers.radix_attention import RadixAttention

    from attnkit.integrations.sglang import create_backend

    config = hf_config(family)
    window = getattr(config, "sliding_window", None)
    layer = RadixAttention(4, 32, 32 ** -0.5, 2, layer_id=0,
                           sliding_window_size=-1 if window is None else window - 1)
    ours_run, theirs_run = runner(config), runner(config)
    ours = _run(create_backend(ours_run), layer, ours_run, config)
    theirs = _run(TorchNativeAttnBackend(theirs_run), layer, theirs_run, config)
    # the K/V attnkit wrote into SGLang's pool are SGLang's own layout
    assert torch.equal(ours_run.token_to_kv_pool.get_key_buffer(0),
                       theirs_run.token_to_kv_pool.get_key_buffer(0))
    return max((a - b).abs().max().item() for a, b in zip(ours, theirs))


@pytest.mark.parametrize("family", ["llama-gqa", "mistral-window"])
def test_forward_matches_sglangs_torch_native_backend(registered, family):
    from attnkit.integrations.sglang.backend import STATS

    before = STATS["forwards"]
    assert _compare(family) <= FP32_TOLERANCE
    assert STATS["forwards"] == before + 3


def test_negative_control_fails_the_comparison(registered, monkeypatch):
    monkeypatch.setenv("ATTNKIT_ENGINE_TEST_SCALE_ERROR", "0.01")
    assert _compare("llama-gqa") > FP32_TOLERANCE
