"""The dense float64 DCA reference itself: DUAL_CHUNK.md's worked example written out by hand,
and equality with plain causal RoPE attention while the sequence fits in chunk_size."""
import pytest
import torch
from dca_session import BASE, make_seqs, reference
from factories import make_layer

from attnkit import reference as plain_reference
from attnkit.backends.batch import Request, build_batch
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import DualChunkConfig
from attnkit.reference_dca import _rotate, dual_chunk_reference

TOY = DualChunkConfig(chunk_size=8, local_size=2)                 # cl = 6


def by_hand(seq, groups, scale):
    """One softmax over (key range, query rotation position) groups; keys at k % 6."""
    q = seq.q.double()
    k = seq.k.double().repeat_interleave(2, dim=1)
    v = seq.v.double().repeat_interleave(2, dim=1)
    logits, values = [], []
    for p, keys, q_pos in groups:
        qr = _rotate(q[[p]], torch.tensor([q_pos]), BASE, q.shape[-1])[0]               # [H, D]
        kr = _rotate(k[list(keys)], torch.tensor([j % 6 for j in keys]), BASE, q.shape[-1])
        logits.append(torch.einsum("hd,mhd->hm", qr, kr) * scale)
        values.append(v[list(keys)])
    probs = torch.softmax(torch.cat(logits, dim=1), dim=1)                              # [H, m]
    return torch.einsum("hm,mhv->hv", probs, torch.cat(values))


@pytest.mark.parametrize("p,groups", [
    # query 13: chunk 2, offset 1 -> intra keys 12-13 at 1, successor 6-11 at 7, inter 0-5 at 8
    (13, [(range(12, 14), 1), (range(6, 12), 7), (range(0, 6), 8)]),
    # query 16: offset 4 -> intra 12-16 at 4, successor clamped to 8, inter at 8
    (16, [(range(12, 17), 4), (range(6, 12), 8), (range(0, 6), 8)]),
], ids=["q13", "q16"])
def test_worked_example_by_hand(p, groups):
    spec = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=TOY).spec
    seq = make_seqs(spec, [20], seed=11)[0]
    want = by_hand(seq, [(p, keys, pos) for keys, pos in groups], spec.softmax_scale)
    got = reference(spec, seq, positions=[p])[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config,length", [(TOY, 8), (DualChunkConfig(64, 16), 64)])
def test_within_chunk_size_is_plain_causal_rope(config, length):
    """attnkit.reference (float64 math, fp32 inputs) on q/k rotated at their real positions."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=config)
    seq = make_seqs(layer.spec, [length], seed=12)[0]
    plain = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    cache = PagedKVCache([plain.spec], num_pages=length, page_size=1, dtype=torch.float32)
    meta = build_batch([Request(0, length, list(range(length)))], page_size=1)
    pos = torch.arange(length)
    rotated = [_rotate(x.double(), pos, BASE, 16).float() for x in (seq.q, seq.k)]
    want = plain_reference.attention(*rotated, seq.v, plain, cache, meta)
    torch.testing.assert_close(reference(layer.spec, seq), want.view(length, 4, 16), rtol=1e-6, atol=1e-6)


def test_length_scale_multiplies_logits_by_s_squared():
    """omax > 0, L > omax: same as the unscaled reference with softmax scale times s²."""
    cfg = DualChunkConfig(8, 2, original_max_position_embeddings=5)
    spec = make_layer(num_heads=2, head_dim=8, dual_chunk=cfg).spec
    seq = make_seqs(spec, [14], seed=13)[0]
    s = 0.1 * torch.log(torch.tensor(14 / 5, dtype=torch.float64)).item() + 1.0
    scaled = reference(spec, seq, [14] * 14)
    plain = dual_chunk_reference(seq.q, seq.k, seq.v, config=cfg, q_positions=range(14),
                                 rope_base=BASE, scale=spec.softmax_scale * s * s)
    torch.testing.assert_close(scaled, plain, rtol=1e-10, atol=1e-10)
