"""triton_mla against the float64 (unabsorbed) reference on tiny MLA shapes (interpreter on CPU)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton_mla.backend import TritonMLABackend

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def run(backend, case):
    step = backend.prepare(case.meta, case.cache)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("heads", [4, 16])
def test_decode(page_size, heads):
    layer = make_layer(kind="mla", num_heads=heads, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[37, 5, 80], new_lens=[1, 1, 1], page_size=page_size,
                     dtype="fp16", device=DEV, seed=page_size + heads)
    assert_close(run(TritonMLABackend(), case), case.reference(), dtype="fp16", what="decode")


@pytest.mark.parametrize("splits", [2, 5, 40])
def test_decode_split_kv(splits):
    """Several KV splits plus the reduce kernel, including splits left empty by short requests."""
    layer = make_layer(kind="mla", num_heads=8, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[300, 3], new_lens=[1, 1], page_size=16, dtype="fp32",
                     device=DEV, seed=splits)
    out = run(TritonMLABackend(num_splits=splits), case)
    assert_close(out, case.reference(), dtype="fp32", what=f"{splits} splits")


def test_verify_causal_drafts():
    """VERIFY: four draft tokens per request, causal among themselves, split KV."""
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[21, 40], new_lens=[4, 4], page_size=16, dtype="fp32",
                     device=DEV, mode=ForwardMode.VERIFY, seed=3)
    assert_close(run(TritonMLABackend(num_splits=3), case), case.reference(), dtype="fp32",
                 what="verify")


@pytest.mark.parametrize("form", ["absorbed", "mha"])
def test_extend_with_prefix(form):
    """Extend with a cached prefix (and a fresh prompt, and a decode) in both forms."""
    layer = make_layer(kind="mla", num_heads=4, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[30, 0, 9], new_lens=[19, 7, 1], page_size=16,
                     dtype="fp16", device=DEV, seed=4)
    backend = TritonMLABackend(mha_form_min_query=1 if form == "mha" else None)
    assert_close(run(backend, case), case.reference(), dtype="fp16", what=form)


def test_mha_form_fp32_page1():
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[5, 17], new_lens=[20, 3], page_size=1, dtype="fp32",
                     device=DEV, seed=5)
    out = run(TritonMLABackend(mha_form_min_query=1), case)
    assert_close(out, case.reference(), dtype="fp32", what="mha fp32")


@pytest.mark.parametrize("form", ["absorbed", "mha"])
def test_fp8_latent_cache(form):
    """An e4m3 latent cache with a scale other than 1 (factories use 0.5)."""
    layer = make_layer(kind="mla", num_heads=8, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[33, 12], new_lens=[1, 2], page_size=16, dtype="fp16",
                     kv_dtype="fp8_e4m3", device=DEV, seed=6)
    backend = TritonMLABackend(num_splits=2, mha_form_min_query=1 if form == "mha" else None)
    assert_close(run(backend, case), case.reference(), dtype="fp16", kv_dtype="fp8_e4m3",
                 what=f"fp8 {form}")


def test_large_logits_and_page_32():
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[50], new_lens=[1], page_size=32, dtype="fp32",
                     device=DEV, seed=7, q_scale=30.0)
    assert_close(run(TritonMLABackend(num_splits=2), case), case.reference(), dtype="fp32",
                 what="large logits")


@pytest.mark.parametrize("threshold", [8, None])
def test_mixed_step_splits_forms(threshold):
    """MIXED step: long chunks take the MHA form, decodes and short chunks the absorbed form,
    each request's rows land in the right place of the output."""
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[9, 30, 0, 50], new_lens=[1, 19, 7, 3], page_size=16,
                     dtype="fp32", device=DEV, seed=8)
    backend = TritonMLABackend(mha_form_min_query=threshold)
    step = backend.prepare(case.meta, case.cache)
    assert sorted(step.prepared) == (["absorbed", "mha"] if threshold else ["absorbed"])
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert_close(out, case.reference(), dtype="fp32", what=f"mixed threshold={threshold}")


def test_wider_key_tiles():
    """The GPU's tile shapes (more keys per tile, deeper pipelining) on the interpreter."""
    layer = make_layer(kind="mla", num_heads=16, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[100, 40], new_lens=[1, 1], page_size=16, dtype="fp16",
                     device=DEV, seed=9)
    for block_n, stages in ((32, 3), (64, 2)):
        out = run(TritonMLABackend(block_n=block_n, num_stages=stages, num_splits=2), case)
        assert_close(out, case.reference(), dtype="fp16", what=f"block_n={block_n}")
