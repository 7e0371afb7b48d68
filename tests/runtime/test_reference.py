"""The reference against independent computations (torch SDPA, hand-written loops)."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnkit import reference
from attnkit.backends.batch import Request, build_batch
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from factories import make_case, make_layer

F64 = torch.float64


def _sdpa(q, k, v, *, causal_offset=None):
    """q [n, H, D], k/v [K, H_kv, D] -> [n, H * D_v] float64; causal with queries at the
    last n positions when causal_offset is given."""
    group = q.shape[1] // k.shape[1]
    qh, kh, vh = (x.to(F64).transpose(0, 1) for x in (q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)))
    mask = None
    if causal_offset is not None:
        mask = torch.arange(k.shape[0])[None, :] <= (torch.arange(q.shape[0])[:, None] + causal_offset)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    return out.transpose(0, 1).reshape(q.shape[0], -1)


def _contiguous(layer, n_prefix, n_new, *, page_size=4, seed=0):
    """All tokens' K/V known in full; the prefix written to the cache, the rest handed in."""
    spec = layer.spec
    g = torch.Generator().manual_seed(seed)
    n = n_prefix + n_new
    q = torch.randn(n_new, spec.num_heads, spec.head_dim, generator=g)
    k = torch.randn(n, spec.num_kv_heads, spec.head_dim, generator=g)
    v = torch.randn(n, spec.num_kv_heads, spec.value_dim, generator=g)
    pages = list(range(-(-n // page_size)))[::-1]          # reversed page order
    cache = PagedKVCache([spec], num_pages=len(pages), page_size=page_size, dtype=torch.float32)
    pre = build_batch([Request(0, n, pages)], page_size=page_size)
    cache.write(spec.layer_id, pre.slot_mapping[:n_prefix], k[:n_prefix], v[:n_prefix])
    meta = build_batch([Request(n_prefix, n_new, pages)], page_size=page_size)
    return q, k, v, cache, meta


@pytest.mark.parametrize("n_prefix, n_new", [(0, 9), (6, 3), (7, 1)])
def test_causal_with_prefix_matches_sdpa(n_prefix, n_new):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=8)
    q, k, v, cache, meta = _contiguous(layer, n_prefix, n_new)
    before = cache.k[0].clone()
    out = reference.attention(q, k[n_prefix:], v[n_prefix:], layer, cache, meta)
    assert out.dtype == F64 and out.shape == (n_new, 4 * 8)
    torch.testing.assert_close(out, _sdpa(q, k, v, causal_offset=n_prefix))
    assert torch.equal(cache.k[0], before)                 # the caller's cache is untouched


def test_encoder_is_non_causal():
    layer = make_layer(num_heads=2, head_dim=8, role="encoder")
    q, k, v, cache, meta = _contiguous(layer, 0, 6)
    torch.testing.assert_close(reference.attention(q, k, v, layer, cache, meta), _sdpa(q, k, v))


def test_cross_attention_cached_equals_written_and_sdpa():
    layer = make_layer(num_heads=4, num_kv_heads=1, head_dim=8, role="cross")
    written = make_case(layer, prefix_lens=[0, 4], new_lens=[3, 1], page_size=4,
                        encoder_lens=[5, 7], encoder="write", seed=1)
    k, v = written.k, written.v
    cached = written.cache
    cached.write(0, written.meta.encoder_slot_mapping, k, v)
    meta = build_batch(written.requests, page_size=4)       # encoder K/V now cached
    out_cached = reference.attention(written.q, None, None, layer, cached, meta)
    torch.testing.assert_close(out_cached, written.reference())
    q0 = written.q[:3]
    torch.testing.assert_close(written.reference()[:3], _sdpa(q0, k[:5], v[:5]))


def test_window_at_least_sequence_equals_full_and_window_one_is_self():
    full = make_layer(num_heads=2, head_dim=8)
    args = dict(prefix_lens=[5, 0], new_lens=[4, 6], page_size=4, seed=2)
    ref_full = make_case(full, **args).reference()
    assert torch.equal(make_case(make_layer(num_heads=2, head_dim=8, sliding_window=10), **args).reference(),
                       ref_full)
    case = make_case(make_layer(num_heads=2, head_dim=8, sliding_window=1), **args)
    torch.testing.assert_close(case.reference(), case.v.to(F64).reshape(case.meta.num_tokens, -1))
    assert not torch.allclose(make_case(make_layer(num_heads=2, head_dim=8, sliding_window=3), **args).reference(),
                              ref_full)


def test_sinks_lower_the_mass_exactly():
    layer = make_layer(num_heads=3, head_dim=8, sinks=True)
    plain = make_layer(num_heads=3, head_dim=8)
    args = dict(prefix_lens=[0], new_lens=[5], page_size=8, seed=3)
    case, base = make_case(layer, **args), make_case(plain, **args)
    q, k = case.q.to(F64), case.k.to(F64)
    logits = torch.einsum("nhd,khd->hnk", q, k) / math.sqrt(8)
    logits = logits.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
    z = torch.exp(logits).sum(-1)                           # [H, n]
    shrink = z / (z + torch.exp(layer.sinks.to(F64))[:, None])
    expect = base.reference().reshape(5, 3, 8) * shrink.T[:, :, None]
    torch.testing.assert_close(case.reference().reshape(5, 3, 8), expect)
    assert (shrink < 1).all()


def test_softcap_and_scale():
    args = dict(prefix_lens=[3], new_lens=[4], page_size=4, seed=4, q_scale=20.0)
    huge_cap = make_case(make_layer(num_heads=2, head_dim=8, logit_softcap=1e9), **args).reference()
    plain = make_case(make_layer(num_heads=2, head_dim=8), **args).reference()
    torch.testing.assert_close(huge_cap, plain)
    capped = make_case(make_layer(num_heads=2, head_dim=8, logit_softcap=1.0), **args).reference()
    assert not torch.allclose(capped, plain)
    # a vanishing scale makes every visible key equally likely: the mean of the visible values
    # (scale 0 itself is refused, AK419, as the planner refuses it)
    case = make_case(make_layer(num_heads=2, head_dim=8, scale=1e-30), prefix_lens=[0], new_lens=[3], seed=5)
    v = case.v.to(F64)
    torch.testing.assert_close(case.reference().reshape(3, 2, 8)[2], v.mean(0))


def test_mla_matches_hand_loop():
    layer = make_layer(kind="mla", num_heads=2, dtype="fp32")
    case = make_case(layer, prefix_lens=[4], new_lens=[2], page_size=4, seed=6)
    mla = layer.spec.mla
    lat = torch.zeros(6, mla.latent_dim, dtype=F64)
    flat = case.cache.latent[0].reshape(-1, mla.latent_dim)
    row = case.requests[0].block_table
    for p in range(4):
        lat[p] = flat[row[p // 4] * 4 + p % 4].to(F64)
    lat[4:] = case.k.to(F64)
    L, nope = mla.kv_lora_rank, mla.qk_nope_head_dim
    scale = 1 / math.sqrt(nope + mla.qk_rope_head_dim)
    out = torch.zeros(2, 2, mla.v_head_dim, dtype=F64)
    for t in range(2):
        for h in range(2):
            qn, qp = case.q[t, h, :nope].to(F64), case.q[t, h, nope:].to(F64)
            s = torch.stack([scale * (qn @ (layer.w_kc[h].to(F64) @ lat[j, :L]) + qp @ lat[j, L:])
                             for j in range(4 + t + 1)])
            p = torch.softmax(s, 0)
            out[t, h] = sum(p[j] * (lat[j, :L] @ layer.w_vc[h].to(F64)) for j in range(len(p)))
    torch.testing.assert_close(case.reference(), out.reshape(2, -1))


def test_verify_equals_extend():
    layer = make_layer(num_heads=2, head_dim=8)
    args = dict(prefix_lens=[9, 3], new_lens=[3, 3], page_size=4, seed=7)
    assert torch.equal(make_case(layer, mode="verify", **args).reference(),
                       make_case(layer, **args).reference())


def test_fp8_cache_reads_back_scaled_values():
    layer = make_layer(num_heads=2, head_dim=8)
    case = make_case(layer, prefix_lens=[0], new_lens=[4], kv_dtype="fp8_e4m3", seed=8)
    c32 = make_case(layer, prefix_lens=[0], new_lens=[4], seed=8)
    err = (case.reference() - c32.reference()).abs().max()
    assert 0 < err < 0.2                                    # rounded, but scale undone


def test_idle_and_dual_chunk():
    layer = make_layer(num_heads=2, head_dim=8)
    case = make_case(layer, prefix_lens=[], new_lens=[])
    assert case.reference().shape == (0, 16)
    from attnkit.model.spec import DualChunkConfig
    dca = make_layer(num_heads=2, head_dim=8, dual_chunk=DualChunkConfig(8, 2))
    case = make_case(dca, prefix_lens=[0], new_lens=[2])
    with pytest.raises(AttnkitError) as err:
        case.reference()
    assert err.value.code == "AK420"
