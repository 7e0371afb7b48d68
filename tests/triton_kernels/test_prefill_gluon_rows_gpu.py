"""The Gluon rows kernel (prefill_gluon_rows.py; the gluon_rows / gluon_rows_persistent variants)
on an sm_90 GPU against the float64 reference: batched fresh prefills of unequal lengths (the
step's K/V read in place), steps over cached prefixes (a gathered copy of the keys) with NaN /
inf in every slot no request owns, GQA and MQA, fp16 and bf16, the three head dims, and that
the kernel ran (no silent fallback to another variant)."""
import pytest
import torch
import triton
from factories import assert_close, make_case, make_layer

from attnkit.backends._triton import LOG2E
from attnkit.backends.triton import tma_path
from attnkit.backends.triton.backend import TritonBackend, query_blocks

pytestmark = pytest.mark.gpu
needs = pytest.mark.skipif(not (torch.cuda.is_available()
                                and torch.cuda.get_device_capability() == (9, 0)
                                and triton.__version__.startswith("3.6.")),
                           reason="the Gluon rows kernel runs on sm_90 with Triton 3.6")
VARIANTS = ("gluon_rows", "gluon_rows_persistent")


@pytest.fixture
def launches(monkeypatch):
    calls = []
    real = tma_path.prefill_gluon_rows_attention

    def counted(q, *args, **kwargs):
        calls.append(kwargs.get("programs"))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(tma_path, "prefill_gluon_rows_attention", counted)
    return calls


def _run(case, variant):
    be = TritonBackend(extend_variant=variant)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    torch.cuda.synchronize()
    return out


@needs
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("prefix_lens, new_lens", [
    ([0] * 6, [1, 77, 300, 1500, 129, 2048]),            # batched fresh: the packed route
    ([500, 0, 1000, 37, 4096], [77, 300, 1, 200, 129]),  # cached prefixes: the gathered route
], ids=["fresh", "prefix"])
def test_batched_steps_match_reference(variant, dim, prefix_lens, new_lens, launches):
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0, garbage=True, seed=dim)
    out = _run(case, variant)
    assert launches, f"{variant} did not run the Gluon rows kernel"
    assert (launches[0] is None) == (variant == "gluon_rows")
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype="bf16", what=f"{variant} d{dim} {prefix_lens} {new_lens}")


@needs
@pytest.mark.parametrize("variant", VARIANTS)
def test_fp16_gqa_and_mqa(variant, launches):
    for heads, kv_heads, dtype in ((4, 4, "fp16"), (32, 4, "bf16"), (8, 1, "fp16")):
        layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=128, dtype=dtype, device="cuda")
        case = make_case(layer, prefix_lens=[0, 300, 0], new_lens=[700, 130, 1], page_size=16,
                         dtype=dtype, device="cuda", q_scale=4.0, garbage=True, seed=heads)
        launches.clear()
        assert_close(_run(case, variant), case.reference(), dtype=dtype, what=f"{variant} {heads}/{kv_heads} {dtype}")
        assert launches, f"{variant} did not run ({heads}/{kv_heads} heads)"


@needs
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("feats, kv_dtype", [(dict(sliding_window=300), None),
                                             (dict(logit_softcap=20.0), None), (dict(), "fp8_e4m3")],
                         ids=["window", "softcap", "fp8-cache"])
def test_what_it_does_not_serve_runs_paged(variant, feats, kv_dtype, launches):
    """A layer or cache the kernel does not serve runs the paged kernel (right, and no Gluon
    launch)."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16", device="cuda", **feats)
    case = make_case(layer, prefix_lens=[0, 200], new_lens=[900, 300], page_size=16, dtype="bf16",
                     kv_dtype=kv_dtype, device="cuda", q_scale=4.0)
    assert_close(_run(case, variant), case.reference(), dtype="bf16", kv_dtype=kv_dtype,
                 what=f"{variant} {feats} {kv_dtype}")
    assert not launches


@needs
@pytest.mark.parametrize("programs", [None, 1, 3, 7, 10_000])
def test_kernel_forms_over_packed_rows(programs):
    """The kernel called directly on a packed fresh step: one program an item, a few programs
    walking many items (ring slots, turns and Q phases carried across requests), more programs
    than items. The output starts as NaN: a row a form skips fails."""
    from attnkit.backends.triton.prefill_gluon_rows import prefill_gluon_rows_attention
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16", device="cuda")
    lens = [129, 1, 640, 255]
    case = make_case(layer, prefix_lens=[0] * 4, new_lens=lens, page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0, seed=7)
    cu = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device="cuda")
    block_req, block_m = query_blocks(lens, lens, 128, device="cuda")
    out = torch.full_like(case.q, float("nan"))
    prefill_gluon_rows_attention(case.q, case.k, case.v, out, block_req=block_req, block_m=block_m,
                                 query_start_loc=cu, key_start=cu[:-1], seq_lens=cu[1:] - cu[:-1],
                                 qk_scale=layer.spec.softmax_scale * LOG2E, v_scale=1.0,
                                 programs=programs)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "a row was not written"
    assert_close(out.reshape(out.shape[0], -1), case.reference(), dtype="bf16", what=f"programs={programs}")
