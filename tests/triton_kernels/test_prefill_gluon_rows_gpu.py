"""The Gluon rows kernel (prefill_gluon_rows.py; the gluon_rows / gluon_rows_persistent variants)
on an sm_90 GPU against the float64 reference: batched fresh prefills of unequal lengths (the
step's K/V read in place), steps over cached prefixes (a gathered copy of the keys) with NaN /
inf in every slot no request owns, GQA and MQA, fp16 and bf16, the three head dims, and that
the kernel ran (no silent fallback to another variant)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer
from gluon_rows_cases import count_launches, needs_gluon_rows as needs, packed_step, run_step as _run

from attnkit.backends.triton import tma_path

pytestmark = pytest.mark.gpu
VARIANTS = ("gluon_rows", "gluon_rows_persistent")


@pytest.fixture
def launches(monkeypatch):
    return count_launches(monkeypatch, tma_path, "prefill_gluon_rows_attention",
                          lambda kwargs: kwargs.get("programs"))


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
    case, rows = packed_step(device="cuda")
    out = torch.full_like(case.q, float("nan"))
    prefill_gluon_rows_attention(case.q, case.k, case.v, out, programs=programs, **rows)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "a row was not written"
    assert_close(out.reshape(out.shape[0], -1), case.reference(), dtype="bf16", what=f"programs={programs}")
