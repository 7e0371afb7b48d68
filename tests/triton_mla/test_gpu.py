"""triton_mla on a CUDA GPU at DeepSeek-V3 sizes (kv_lora_rank 512, rope 64, nope 128, v 128)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.model.spec import MLAConfig

pytestmark = pytest.mark.gpu
DSV3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
SCALE = 1.0 / 192 ** 0.5
# every absorbed split-kernel variant (the plan chooses one per bucket)
VARIANT = pytest.mark.parametrize("variant", ["auto", "v1", "v2", "tma", "ws"])


def _run(backend, case):
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    torch.cuda.synchronize()
    return out


def _layer(heads, dtype):
    return make_layer(kind="mla", num_heads=heads, mla=DSV3, dtype=dtype, device="cuda",
                      scale=SCALE, seed=heads)


@VARIANT
@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_decode_bf16(heads, page_size, variant):
    case = make_case(_layer(heads, "bf16"), prefix_lens=[1500, 3, 700, 64], new_lens=[1] * 4,
                     page_size=page_size, dtype="bf16", device="cuda", seed=page_size)
    assert_close(_run(TritonMLABackend(variant=variant), case), case.reference(), dtype="bf16",
                 what=f"decode {variant} H={heads} page={page_size}")


@VARIANT
@pytest.mark.parametrize("heads", [16, 128])
def test_decode_fp8_latent(heads, variant):
    case = make_case(_layer(heads, "bf16"), prefix_lens=[2000, 37], new_lens=[1, 1],
                     page_size=64, dtype="bf16", kv_dtype="fp8_e4m3", device="cuda", seed=1)
    assert_close(_run(TritonMLABackend(variant=variant), case), case.reference(), dtype="bf16",
                 kv_dtype="fp8_e4m3", what=f"fp8 {variant} H={heads}")


@VARIANT
@pytest.mark.parametrize("heads", [16, 128])
def test_verify_bf16(heads, variant):
    case = make_case(_layer(heads, "bf16"), prefix_lens=[300, 1200], new_lens=[4, 4],
                     page_size=64, dtype="bf16", device="cuda", mode=ForwardMode.VERIFY, seed=2)
    assert_close(_run(TritonMLABackend(variant=variant), case), case.reference(), dtype="bf16",
                 what=f"verify {variant}")


@pytest.mark.parametrize("form", ["absorbed", "mha"])
def test_extend_bf16(form):
    case = make_case(_layer(16, "bf16"), prefix_lens=[500, 0], new_lens=[200, 77], page_size=64,
                     dtype="bf16", device="cuda", seed=3)
    backend = TritonMLABackend(mha_form_min_query=1 if form == "mha" else None)
    assert_close(_run(backend, case), case.reference(), dtype="bf16", what=form)


@pytest.mark.parametrize("form", ["absorbed", "mha", "absorbed-v1"])
def test_fp32_and_fp16(form):
    for dt in ("fp32", "fp16"):
        case = make_case(_layer(16, dt), prefix_lens=[130, 5], new_lens=[3, 1], page_size=16,
                         dtype=dt, device="cuda", seed=4)
        backend = TritonMLABackend(mha_form_min_query=1 if form == "mha" else None,
                                   variant="v1" if form == "absorbed-v1" else None)
        assert_close(_run(backend, case), case.reference(), dtype=dt, what=f"{form} {dt}")


@VARIANT
def test_every_output_written(variant):
    """Poison-free check: NaN-filled spare pages must never leak into the output."""
    case = make_case(_layer(128, "bf16"), prefix_lens=[4000], new_lens=[1], page_size=64,
                     dtype="bf16", device="cuda", seed=5, spare_pages=4)
    used = set(p for r in case.requests for p in r.block_table)
    spare = [p for p in range(case.cache.num_pages) if p not in used]
    case.cache.latent[0][spare] = float("nan")
    out = _run(TritonMLABackend(variant=variant), case)
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype="bf16", what="nan spare pages")


@VARIANT
@pytest.mark.parametrize("heads", [16, 128])
def test_mixed_step_default_forms(heads, variant):
    """Chunked prefill (MHA form where the plan's table lists it first: 40 and 64 new tokens)
    beside decodes and a verify-sized chunk (absorbed), with KV splits and the reduce kernel in
    the absorbed part."""
    from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable
    r = lambda v: KernelRate(v, 1.0, "TFLOP/s")  # noqa: E731
    table = KernelTable("extend", rows=(KernelRow(4, 2, 1000, (r("column_split"), r("mha_form"))),
                                        KernelRow(4, 64, 1000, (r("mha_form"), r("column_split")))),
                        fallback=("column_split", "whole_rows", "mha_form"))
    case = make_case(_layer(heads, "bf16"), prefix_lens=[3000, 100, 0, 40], new_lens=[1, 64, 40, 3],
                     page_size=64, dtype="bf16", device="cuda", seed=6)
    backend = TritonMLABackend(variant=variant, kernels={"extend": table})
    step = backend.prepare(case.meta, case.cache)
    assert sorted(step.prepared) == ["absorbed", "mha"]
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert_close(out, case.reference(), dtype="bf16", what=f"mixed H={heads}")


@VARIANT
def test_long_context_many_splits(variant):
    """B=1 at 32k: hundreds of KV splits merged by the reduce kernel."""
    case = make_case(_layer(16, "bf16"), prefix_lens=[32767], new_lens=[1], page_size=64,
                     dtype="bf16", device="cuda", seed=7)
    assert_close(_run(TritonMLABackend(variant=variant), case), case.reference(), dtype="bf16",
                 what=f"32k {variant}")
