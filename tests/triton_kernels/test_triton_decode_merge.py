"""Decode variant "fused": the last split program of each (request, KV head) merges the splits
(decode_merge.py), so the step is one launch. Interpreter on CPU; the GPU tests run it at
bf16 shapes, where programs really race for the last ticket."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton.backend import TritonBackend
from attnkit.backends.triton.decode_merge import merge_shape


@pytest.mark.parametrize("heads,kv_heads,sinks", [(8, 8, False), (16, 2, True), (4, 1, False)])
def test_merged_in_the_kernel_layer_after_layer(heads, kv_heads, sinks):
    from attnkit.backends._triton import interpreting
    if not interpreting():
        pytest.skip("interpreter test on a CUDA machine: test_triton_gpu.py covers the GPU")
    """Two layers' forwards on one step plan share its tickets: each kernel resets them."""
    layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=64, sinks=sinks,
                       dtype="fp16")
    case = make_case(layer, prefix_lens=[70, 3, 41], new_lens=[1, 1, 1], page_size=8,
                     dtype="fp16")
    backend = TritonBackend(decode_variant="fused", num_splits=4)
    step = backend.prepare(case.meta, case.cache)
    assert step.prepared.counters is not None
    for _ in range(2):
        out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
        assert_close(out, case.reference(), dtype="fp16", what=f"{heads}/{kv_heads} fused")
        assert int(step.prepared.counters.abs().sum()) == 0        # every ticket handed back


def test_wide_groups_keep_the_reduce_launch():
    """A group whose merge tile would be too wide takes the separate reduce kernel."""
    assert merge_shape(4, 128) == (4, 16)
    assert merge_shape(1, 256) == (1, 16)
    assert merge_shape(64, 128) == (64, 1)
    assert merge_shape(128, 128) is None
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[5], new_lens=[1], page_size=8, dtype="fp16")
    assert TritonBackend(decode_variant="v2").prepare(case.meta, case.cache).prepared.counters is None
    assert isinstance(TritonBackend(decode_variant="fused").prepare(case.meta, case.cache).prepared.counters,
                      torch.Tensor)
