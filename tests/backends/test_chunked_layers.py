"""Chunked local attention through the public backend API, beyond the conformance cases:
layers with different chunks (and none) in one step, which share the step's memoised masks
and split counts, and a single prompt (where sdpa would otherwise take its is_causal path).
Triton runs through the interpreter on CPU.
"""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends._triton import interpreting
from attnkit.registry import load_backend

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BACKENDS = ["torch_native", "sdpa", "triton"]


def _usable(name: str) -> None:
    if name == "triton" and DEVICE == "cpu" and not interpreting():
        pytest.skip("triton on CPU needs the interpreter (TRITON_INTERPRET=1)")


def _cases(chunks, **case_kw):
    """One case per chunk (None: plain causal), all from one seed: the same q, k, v and
    cache, so every layer can run on the first case's cache and step."""
    return [make_case(make_layer(num_heads=4, num_kv_heads=2, head_dim=64, attention_chunk=c,
                                 dtype="fp32", device=DEVICE), dtype="fp32", device=DEVICE,
                      seed=7, **case_kw) for c in chunks]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["extend", "decode"])
def test_layers_with_other_chunks_share_one_step(backend, mode):
    """Chunked layers first, then an unchunked one: a mask or split count memoised for one
    layer and reused by another with a different chunk would show here."""
    _usable(backend)
    lens = (dict(prefix_lens=[0, 19], new_lens=[40, 9]) if mode == "extend"
            else dict(prefix_lens=[70, 23, 5], new_lens=[1, 1, 1]))
    cases = _cases([8, 24, None, 8], page_size=5, **lens)
    base = cases[0]
    impl = load_backend(backend)
    step = impl.prepare(base.meta, base.cache)
    for case in cases:        # the step's K/V written again by each layer: the same values
        out = impl.forward(base.q, base.k, base.v, case.layer, base.cache, step)
        assert_close(out, case.reference(), dtype="fp32",
                     what=f"{backend} {mode} chunk={case.layer.spec.attention_chunk}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_prompt_from_position_zero(backend):
    """One request, no prefix, as many keys as queries: the square causal step."""
    _usable(backend)
    (case,) = _cases([8], prefix_lens=[0], new_lens=[29], page_size=16)
    impl = load_backend(backend)
    out = impl.forward(case.q, case.k, case.v, case.layer, case.cache, impl.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="fp32", what=backend)
