"""Both absorbed split-kernel variants (decode.VARIANTS) against the float64 reference on tiny
MLA shapes (interpreter on CPU): v1, v2 with the whole latent per program (v_split 1) and v2
with the latent columns split across two programs (v_split 2, the GPU default at 64 heads)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.errors import AttnkitError

DEV = "cuda" if torch.cuda.is_available() else "cpu"
KINDS = [("v1", None), ("v2", 1), ("v2", 2)]


def run(backend, case):
    step = backend.prepare(case.meta, case.cache)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


@pytest.mark.parametrize("variant, v_split", KINDS)
@pytest.mark.parametrize("page_size, block_n, splits", [(1, 16, 3), (16, 16, 1), (64, 32, 2)])
def test_decode_fp16(variant, v_split, page_size, block_n, splits):
    """page 1: per-row gather; page 16 / 64 with block_n dividing it: one page per key tile."""
    layer = make_layer(kind="mla", num_heads=16, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[70, 5, 130], new_lens=[1, 1, 1], page_size=page_size,
                     dtype="fp16", device=DEV, seed=page_size)
    be = TritonMLABackend(variant=variant, v_split=v_split, block_n=block_n, num_splits=splits)
    assert_close(run(be, case), case.reference(), dtype="fp16", what=f"{variant}/{v_split}")


@pytest.mark.parametrize("variant, v_split", KINDS)
def test_verify_fp32_split_kv(variant, v_split):
    """fp32 (IEEE dots), causal draft tokens, KV splits with empty ones and the merge."""
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[21, 40], new_lens=[4, 4], page_size=16, dtype="fp32",
                     device=DEV, mode=ForwardMode.VERIFY, seed=3)
    be = TritonMLABackend(variant=variant, v_split=v_split, num_splits=5)
    assert_close(run(be, case), case.reference(), dtype="fp32", what=f"{variant}/{v_split}")


@pytest.mark.parametrize("variant, v_split", KINDS)
def test_fp8_latent(variant, v_split):
    layer = make_layer(kind="mla", num_heads=8, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[33, 12], new_lens=[1, 1], page_size=16, dtype="fp16",
                     kv_dtype="fp8_e4m3", device=DEV, seed=6)
    be = TritonMLABackend(variant=variant, v_split=v_split, num_splits=2)
    assert_close(run(be, case), case.reference(), dtype="fp16", kv_dtype="fp8_e4m3",
                 what=f"fp8 {variant}/{v_split}")


def test_unknown_variant_is_ak407():
    with pytest.raises(AttnkitError) as info:
        TritonMLABackend(variant="v9")
    assert info.value.code == "AK407" and info.value.field == "variant"


def test_pdl_option_is_a_bool_ak407_otherwise():
    with pytest.raises(AttnkitError) as info:
        TritonMLABackend(variant="v2", pdl="yes")
    assert info.value.code == "AK407" and info.value.field == "pdl"


def test_pdl_is_off_where_it_cannot_launch():
    """pdl=True off a GPU (or interpreted) launches as without it: same result, flag off."""
    from attnkit.backends.triton_mla import backend as mla_backend
    assert not mla_backend._pdl_ok(torch.device("cpu"))
    layer = make_layer(kind="mla", num_heads=8, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[33, 12], new_lens=[1, 1], page_size=16, dtype="fp16",
                     device=DEV, seed=7)
    be = TritonMLABackend(variant="v2", num_splits=2, pdl=True)
    assert_close(run(be, case), case.reference(), dtype="fp16", what="v2 pdl requested")


def test_v2_all_heads_in_one_program():
    """v2's 128-head tile (one program for every head of a rank, both column blocks)."""
    layer = make_layer(kind="mla", num_heads=128, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[40, 7], new_lens=[1, 2], page_size=16, dtype="fp16",
                     device=DEV, seed=11)
    be = TritonMLABackend(variant="v2", v_split=2, block_h=128, num_splits=2)
    assert_close(run(be, case), case.reference(), dtype="fp16", what="v2 128 heads")
