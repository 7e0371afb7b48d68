"""triton's batch-invariant variants, split_fixed (decode) and paged_fixed (prefill / extend),
against the float64 reference: several fixed splits per request merged in key order, empty
splits of a grid sized for a longer request, sliding window, softcap, sinks, chunked local
attention, fp8 KV, and MIXED steps whose one-token rows run the decode kernel. On CPU through
the Triton interpreter (fp16 / fp32, its 32-key splits); marked gpu: bf16, long requests at the
GPU's 256-key splits. Their bit-for-bit claims are tests/conformance/test_bitwise.py's."""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.errors import AttnkitError
from attnkit.registry import load_backend

LAYERS = {
    "gqa": dict(num_heads=8, num_kv_heads=2, head_dim=64),
    "window-softcap-sinks": dict(num_heads=4, num_kv_heads=2, head_dim=64, sliding_window=37,
                                 logit_softcap=8.0, sinks=True),
    "chunked": dict(num_heads=4, num_kv_heads=1, head_dim=64, attention_chunk=24),
}
# (prefix, new) per request; the decode ones span 1 to 5 interpreter splits
DECODE = dict(prefix_lens=[150, 2, 31, 64], new_lens=[1, 1, 1, 1])
MIXED = dict(prefix_lens=[40, 70, 0, 12], new_lens=[9, 1, 20, 1])
GPU_DECODE = dict(prefix_lens=[3000, 2, 255, 700], new_lens=[1, 1, 1, 1])
GPU_MIXED = dict(prefix_lens=[600, 2100, 0, 257], new_lens=[130, 1, 300, 1])


def _check(run_triton, layer_kw, case_kw, *, dtype, device="cpu", kv_dtype=None, what=""):
    case = make_case(make_layer(**layer_kw, dtype=dtype, device=device), dtype=dtype, kv_dtype=kv_dtype,
                     device=device, page_size=8, seed=len(what), **case_kw)
    out = run_triton(case, batch_invariant=True)
    assert_close(out, case.reference(), dtype=dtype, kv_dtype=kv_dtype, what=what)
    return case


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("step", ["decode", "mixed"])
def test_fixed_variants_match_the_reference(run_triton, step, layer, dtype):
    case = _check(run_triton, LAYERS[layer], DECODE if step == "decode" else MIXED, dtype=dtype,
                  what=f"{step} {layer} {dtype}")
    assert case.meta.mode is (ForwardMode.DECODE if step == "decode" else ForwardMode.MIXED)


def test_fixed_decode_reads_an_fp8_cache(run_triton):
    _check(run_triton, LAYERS["gqa"], DECODE, dtype="fp16", kv_dtype="fp8_e4m3", what="fp8")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("step", ["decode", "mixed"])
def test_fixed_variants_on_the_gpu(run_triton, step, layer, dtype):
    _check(run_triton, {**LAYERS[layer], "head_dim": 128}, GPU_DECODE if step == "decode" else GPU_MIXED,
           dtype=dtype, device="cuda", what=f"gpu {step} {layer} {dtype}")


@pytest.mark.parametrize("options", [dict(decode_variant="split_fixed", num_splits=4),
                                     dict(batch_invariant=True, extend_variant="tma"),
                                     dict(batch_invariant=True, decode_variant="split")])
def test_options_that_would_size_splits_by_the_batch_are_refused(options):
    pytest.importorskip("triton")
    with pytest.raises(AttnkitError) as err:
        load_backend("triton", **options)
    assert err.value.code == "AK407"
