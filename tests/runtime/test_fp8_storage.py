"""fp8 KV storage by hand: known values -> known bytes and read-back values, for the cache
(PagedKVCache.write / dequant) and for the reference's own copy of the convention
(reference.round_to_cache / read_back). stored = fp8(clamp(value / scale)), read = stored * scale.

e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits, no inf, max 448 = 0x7E (0x7F is NaN).
e5m2:   1 sign, 5 exponent (bias 15), 2 mantissa bits, max 57344 = 0x7B.
"""
import pytest
import torch

from attnkit import reference
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention

# (value written, stored value, its byte): K in e4m3fn with scale 0.5 (stored = 2 * value)
E4M3_K = [
    (0.5, 1.0, 0x38),            # 0 0111 000
    (-0.25, -0.5, 0xB0),         # 1 0110 000
    (0.5625, 1.125, 0x39),       # 0 0111 001
    (0.53125, 1.0, 0x38),        # 1.0625: halfway between 1.0 and 1.125, to even -> 1.0
    (0.59375, 1.25, 0x3A),       # 1.1875: halfway between 1.125 and 1.25, to even -> 1.25
    (1000.0, 448.0, 0x7E),       # 2000 saturates at the largest finite value
    (-1000.0, -448.0, 0xFE),
    (2.0 ** -10, 2.0 ** -9, 0x01),   # smallest subnormal
]
# V in e5m2 with scale 0.25 (stored = 4 * value)
E5M2_V = [
    (0.25, 1.0, 0x3C),           # 0 01111 00
    (-0.5, -2.0, 0xC0),          # 1 10000 00
    (0.3125, 1.25, 0x3D),        # 0 01111 01
    (1e6, 57344.0, 0x7B),        # saturates
]


@pytest.mark.parametrize("dtype, table, scale_name", [
    (torch.float8_e4m3fn, E4M3_K, "k"), (torch.float8_e5m2, E5M2_V, "v")], ids=["e4m3-k", "e5m2-v"])
def test_cache_stores_the_hand_computed_bytes(dtype, table, scale_name):
    scale = {"k": 0.5, "v": 0.25}[scale_name]
    n = len(table)
    spec = LayerAttention(layer_id=0, num_heads=1, num_kv_heads=1, head_dim=1)
    cache = PagedKVCache([spec], num_pages=n + 1, page_size=1, dtype=dtype,
                         k_scales={0: 0.5}, v_scales={0: 0.25})
    values = torch.tensor([t[0] for t in table]).view(n, 1, 1)
    slots = torch.arange(1, n + 1)                          # page 0 left untouched
    other = torch.zeros(n, 1, 1)
    k, v = (values, other) if scale_name == "k" else (other, values)
    cache.write(0, slots, k, v)
    buf = getattr(cache, scale_name)[0]
    assert buf.view(torch.uint8).flatten().tolist() == [0] + [t[2] for t in table]
    read = [t[1] * scale for t in table]
    assert cache.dequant(buf, scale, torch.float64).flatten()[1:].tolist() == read
    # the reference's own convention gives the same numbers, from the values and from the bytes
    assert reference.round_to_cache(values, dtype, scale).flatten().tolist() == read
    assert reference.read_back(buf, scale).flatten()[1:].tolist() == read


def test_non_fp8_caches_ignore_the_scale():
    spec = LayerAttention(layer_id=0, num_heads=1, num_kv_heads=1, head_dim=2)
    cache = PagedKVCache([spec], num_pages=1, page_size=2, dtype="bf16", k_scales={0: 0.5})
    x = torch.tensor([[[1.0 + 2 ** -9, 3.0]], [[-2.0, 0.1]]])   # 1 + 2^-9: rounds to 1.0 in bf16
    cache.write(0, torch.tensor([0, 1]), x, x)
    assert cache.k[0].flatten().tolist() == [1.0, 3.0, -2.0, torch.tensor(0.1).bfloat16().item()]
    assert torch.equal(reference.round_to_cache(x, torch.bfloat16, 0.5).flatten(),
                       cache.k[0].double().flatten())


def test_fp8_means_fp8_e4m3_in_the_cache_as_in_the_planner():
    """Issue 25: `plan --kv-cache-dtype fp8` was fp8_e4m3 but PagedKVCache(dtype='fp8') was AK430."""
    import attnkit
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.model.spec import LayerAttention

    layers = [LayerAttention(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=64)]
    assert attnkit.plan("llama-3.1-8b", "cpu", kv_cache_dtype="fp8").settings["kv_cache_dtype"] == "fp8_e4m3"
    assert PagedKVCache(layers, num_pages=2, page_size=16, dtype="fp8").dtype == torch.float8_e4m3fn
    assert PagedKVCache(layers, num_pages=2, page_size=16, dtype="bfloat16").dtype == torch.bfloat16
