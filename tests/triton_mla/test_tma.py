"""The tensor-descriptor absorbed kernel (decode_tma.py) against the float64 reference on
tiny MLA shapes (interpreter on CPU; DeepSeek-V3 sizes in test_gpu.py). It serves 128-head
programs of a 16-bit cache; elsewhere variant "tma" runs v2."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.backends.triton_mla.decode_tma import tma_ready

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _run(backend, case):
    step = backend.prepare(case.meta, case.cache)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


@pytest.mark.parametrize("splits", [1, 3])
def test_tma_128_heads_decode_and_verify(splits):
    layer = make_layer(kind="mla", num_heads=128, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[40, 7], new_lens=[1, 2], page_size=16, dtype="fp16",
                     device=DEV, seed=12)
    latent = case.cache.latent[0]
    assert tma_ready(case.q, latent.view(-1, latent.shape[-1]), page_size=16, block_h=128,
                     block_n=16)
    be = TritonMLABackend(variant="tma", v_split=2, block_h=128, block_n=16, num_splits=splits)
    assert_close(_run(be, case), case.reference(), dtype="fp16", what=f"tma splits={splits}")


def test_stale_slots_of_the_last_page_never_reach_the_output():
    """Slots past a request's keys in its last page hold NaN (a reused page): the kernel reads
    the whole tile, so it must select those rows away, not weight them by zero."""
    layer = make_layer(kind="mla", num_heads=128, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[20], new_lens=[1], page_size=16, dtype="fp16",
                     device=DEV, seed=4)
    ref = case.reference()
    last_page = case.requests[0].block_table[-1]
    case.cache.latent[0][last_page, 21 - 16:] = float("nan")    # keys 0..20 are live
    be = TritonMLABackend(variant="tma", v_split=2, block_h=128, block_n=16, num_splits=1)
    assert_close(_run(be, case), ref, dtype="fp16", what="stale NaN slots")


def test_where_tma_does_not_serve_v2_runs():
    """fp8 latent, 16-head programs and key tiles across pages fall back to v2 (same result)."""
    fp8 = make_case(make_layer(kind="mla", num_heads=128, dtype="fp16", device=DEV),
                    prefix_lens=[33], new_lens=[1], page_size=16, dtype="fp16",
                    kv_dtype="fp8_e4m3", device=DEV, seed=6)
    lat = fp8.cache.latent[0].view(-1, fp8.cache.latent[0].shape[-1])
    assert not tma_ready(fp8.q, lat, page_size=16, block_h=128, block_n=16)
    assert not tma_ready(fp8.q, lat.to(torch.float16), page_size=16, block_h=64, block_n=16)
    assert not tma_ready(fp8.q, lat.to(torch.float16), page_size=16, block_h=128, block_n=32)
    be = TritonMLABackend(variant="tma", v_split=2, block_h=128, block_n=16, num_splits=1)
    assert_close(_run(be, fp8), fp8.reference(), dtype="fp16", kv_dtype="fp8_e4m3", what="fp8")
