"""The DSA index-key cache (PagedKVCache.index_k / index_k_scale, docs/dsa.md): which layers
have it, its dtype rule, the per-token fp8 format (checked against values worked out here, not
against the cache's code), the checks of write_index, and the memory check counting it."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig, SparseTopK

MLA = MLAConfig(kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16)
DSA = LayerAttention(0, 4, 1, 24, 16, kind="mla", mla=MLA, sparse_topk=SparseTopK(4, 2, 8))
DENSE = LayerAttention(1, 4, 1, 24, 16, kind="mla", mla=MLA)


@pytest.mark.parametrize("kv, index, want", [("bf16", None, torch.bfloat16), ("fp32", None, torch.float32),
                                             ("fp8_e4m3", None, torch.float8_e4m3fn),
                                             ("fp8_e5m2", None, torch.float8_e4m3fn),
                                             ("bf16", "fp8", torch.float8_e4m3fn), ("fp8_e4m3", "fp16", torch.float16)])
def test_only_dsa_layers_hold_index_keys_in_the_index_dtype(kv, index, want):
    cache = PagedKVCache([DSA, DENSE], num_pages=3, page_size=4, dtype=kv, index_dtype=index)
    assert set(cache.index_k) == {0} and cache.index_k[0].shape == (3, 4, 8)
    assert cache.index_k[0].dtype == want == cache.index_dtype
    assert set(cache.index_k_scale) == ({0} if want == torch.float8_e4m3fn else set())


@pytest.mark.parametrize("bad", ["fp8_e5m2", "int8", 3, torch.float64])
def test_an_index_dtype_outside_the_list_is_ak430(bad):
    with pytest.raises(AttnkitError) as err:
        PagedKVCache([DSA], num_pages=2, page_size=4, index_dtype=bad)
    assert err.value.code == "AK430" and err.value.field == "index_dtype"


def test_fp8_index_keys_are_stored_with_one_scale_per_token():
    cache = PagedKVCache([DSA], num_pages=2, page_size=4, dtype="bf16", index_dtype="fp8_e4m3")
    k = torch.tensor([[0.5, -1.0, 2.0, 0.25, 0.0, 0.0, 0.0, 0.0],      # amax 2: scale 2 / 448
                      [0.0] * 8,                                      # all zero: floor 1e-4
                      [448.0 * 3, 1.0, 0, 0, 0, 0, 0, 0]])             # amax 1344: scale 3
    cache.write_index(0, torch.tensor([6, 1, 3]), k)
    scale = cache.index_k_scale[0].view(-1)
    assert scale[6].item() == pytest.approx(2 / 448) and scale[1].item() == pytest.approx(1e-4 / 448)
    assert scale[3].item() == pytest.approx(3.0)
    stored = cache.index_k[0].view(-1, 8).float()
    assert stored[6, :4].tolist() == [112.0, -224.0, 448.0, 56.0]       # k / scale, exact in e4m3
    assert stored[3, :2].tolist() == [448.0, 0.34375]                    # 1/3 rounds to nearest
    back = cache.read_index(0, torch.tensor([6, 1, 3]))
    torch.testing.assert_close(back[:2], k[:2], rtol=0, atol=0)          # exact: k / scale fits e4m3
    assert back[2, :2].tolist() == pytest.approx([1344.0, 0.34375 * 3])


def test_write_index_checks_everything_first():
    cache = PagedKVCache([DSA, DENSE], num_pages=2, page_size=4, dtype="fp32")
    k = torch.randn(2, 8)
    for layer, slots, keys, code in ((1, [0, 1], k, "AK418"), (0, [0, 8], k, "AK415"), (0, [2, 2], k, "AK416"),
                                     (0, [0, 1], k[:, :4], "AK411"), (7, [0, 1], k, "AK418")):
        with pytest.raises(AttnkitError) as err:
            cache.write_index(layer, torch.tensor(slots), keys)
        assert err.value.code == code
    assert not cache.index_k[0].any()


def test_the_memory_check_counts_the_index_keys_and_their_scales(monkeypatch):
    seen = []
    monkeypatch.setattr("attnkit.kvcache.paged.check_fits", lambda need, dev, **kw: seen.append(need))
    PagedKVCache([DSA], num_pages=5, page_size=4, dtype="bf16", index_dtype="bf16")
    PagedKVCache([DSA], num_pages=5, page_size=4, dtype="bf16", index_dtype="fp8_e4m3")
    PagedKVCache([DENSE], num_pages=5, page_size=4, dtype="bf16")
    latent = 5 * 4 * MLA.latent_dim * 2
    assert seen == [latent + 5 * 4 * 8 * 2, latent + 5 * 4 * (8 + 4), latent]
