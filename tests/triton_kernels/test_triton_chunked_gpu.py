"""Chunked local attention on a CUDA GPU at Llama-4 sizes: bf16, head dim 128, 40 query and
8 KV heads (Llama-4 Scout), chunks of 256 and 1024 keys and Llama-4's own 8192, sequences
spanning several chunks, page sizes that divide the chunk and one (48) that does not.
Triton (both variants of each kernel) and the two torch backends, against the float64
reference computed on the GPU.
"""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton.decode import DECODE_VARIANTS
from attnkit.backends.triton.extend import EXTEND_VARIANTS
from attnkit.registry import load_backend

pytestmark = pytest.mark.gpu
SCOUT = dict(num_heads=40, num_kv_heads=8, head_dim=128)
SHAPES = [("mixed", v) for v in EXTEND_VARIANTS] + [("decode", v) for v in DECODE_VARIANTS]


def _lens(shape: str, chunk: int) -> dict:
    """Prompts and cached prefixes that cross chunk boundaries; decodes last in a chunk,
    first in a chunk, and a few chunks in."""
    if shape == "mixed":
        return dict(prefix_lens=[chunk - 100, 0, 2 * chunk + 5, chunk - 1],
                    new_lens=[300, chunk + 476, 1, 2])
    return dict(prefix_lens=[chunk - 1, chunk, 3 * chunk + 60, 3 * chunk - 1, chunk // 2],
                new_lens=[1] * 5)


def _option(shape: str, variant: str) -> dict:
    return dict(extend_variant=variant) if shape == "mixed" else dict(decode_variant=variant)


def _case(chunk: int, page_size: int, lens: dict, seed: int = 0):
    layer = make_layer(**SCOUT, attention_chunk=chunk, dtype="bf16", device="cuda")
    return make_case(layer, dtype="bf16", device="cuda", page_size=page_size, seed=seed, **lens)


@pytest.mark.parametrize("shape,variant", SHAPES)
@pytest.mark.parametrize("page_size", [16, 64, 48])
@pytest.mark.parametrize("chunk", [256, 1024])
def test_triton_chunked_scout_shapes(run_triton, chunk, page_size, shape, variant):
    case = _case(chunk, page_size, _lens(shape, chunk), seed=chunk + page_size)
    assert_close(run_triton(case, **_option(shape, variant)), case.reference(), dtype="bf16",
                 what=f"chunk {chunk} page {page_size} {shape} {variant}")


@pytest.mark.parametrize("shape,variant", SHAPES)
def test_triton_llama4_chunk_8192(run_triton, shape, variant):
    """Llama-4's chunk: a prefill of 400 tokens across key 8192 over a cached prefix, and
    decodes on both sides of it (the decode kernel splits the chunk's keys)."""
    lens = (dict(prefix_lens=[8000, 0], new_lens=[400, 700]) if shape == "mixed"
            else dict(prefix_lens=[8191, 8192, 8192 + 3000, 5000], new_lens=[1] * 4))
    case = _case(8192, 64, lens, seed=8192)
    assert_close(run_triton(case, **_option(shape, variant)), case.reference(), dtype="bf16",
                 what=f"chunk 8192 {shape} {variant}")


@pytest.mark.parametrize("shape", ["mixed", "decode"])
@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
def test_torch_backends_chunked_scout_shapes(backend, shape):
    case = _case(256, 48, _lens(shape, 256), seed=3)
    impl = load_backend(backend)
    out = impl.forward(case.q, case.k, case.v, case.layer, case.cache, impl.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="bf16", what=f"{backend} {shape}")
