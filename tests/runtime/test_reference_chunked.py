"""The reference's chunked local attention (attention_chunk) against a loop over the rule
itself, and the spec checks every backend runs before it (AK419)."""
import pytest
import torch

from attnkit import reference
from attnkit.backends.batch import slots_of
from attnkit.errors import AttnkitError
from factories import make_case, make_layer

F64 = torch.float64


def _keys_in_order(case, i):
    """Request i's K and V [kv_len, H_kv, D] float64, read through its block table from the
    cache as it is after the step (prefix plus this step's tokens)."""
    keys, values = reference.stored_kv(case.k, case.v, case.layer, case.cache, case.meta)
    n = case.meta.seq_lens_cpu[i]
    slots = slots_of(case.requests[i].block_table, range(n), case.meta.page_size)
    return keys[slots], values[slots]


def _loop_oracle(case, chunk):
    """Query j of request i sits at p = prefix + j and sees key k iff k <= p and k and p fall in
    the same chunk of ``chunk`` positions counted from 0. One softmax per (query, head)."""
    spec = case.layer.spec
    group = spec.num_heads // spec.num_kv_heads
    rows, start = [], 0
    for i, r in enumerate(case.requests):
        k, v = _keys_in_order(case, i)
        for j in range(r.num_new):
            p = r.prefix_len + j
            seen = [key for key in range(p + 1) if key // chunk == p // chunk]
            heads = []
            for h in range(spec.num_heads):
                qv = case.q[start + j, h].to(F64)
                kk, vv = k[seen, h // group], v[seen, h // group]
                w = torch.softmax(kk @ qv * spec.softmax_scale, dim=0)
                heads.append(w @ vv)
            rows.append(torch.cat(heads))
        start += r.num_new
    return torch.stack(rows)


@pytest.mark.parametrize("chunk", [1, 3, 8])
@pytest.mark.parametrize("prefix_lens,new_lens", [([0], [20]), ([7], [9]), ([15, 8], [1, 1]),
                                                  ([2, 0], [11, 17])])
def test_chunk_mask_matches_the_rule(chunk, prefix_lens, new_lens):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=8, attention_chunk=chunk)
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=5, seed=chunk)
    torch.testing.assert_close(case.reference(), _loop_oracle(case, chunk))


def test_chunk_one_sees_only_itself_and_a_long_chunk_is_plain_causal():
    args = dict(prefix_lens=[6, 0], new_lens=[5, 9], page_size=4, seed=3)
    one = make_case(make_layer(num_heads=2, head_dim=8, attention_chunk=1), **args)
    own_v = torch.cat([one.v[t] for t in range(one.meta.num_tokens)]).reshape(one.meta.num_tokens, -1)
    torch.testing.assert_close(one.reference(), own_v.to(F64))       # softmax over one key
    long = make_case(make_layer(num_heads=2, head_dim=8, attention_chunk=100), **args)
    plain = make_case(make_layer(num_heads=2, head_dim=8), **args)
    assert torch.equal(long.reference(), plain.reference())


@pytest.mark.parametrize("bad", [dict(attention_chunk=0), dict(attention_chunk=-4),
                                 dict(attention_chunk=True), dict(attention_chunk=2.5),
                                 dict(attention_chunk=8, role="encoder"),
                                 dict(attention_chunk=8, role="cross")])
def test_bad_chunk_specs_are_ak419(bad):
    layer = make_layer(num_heads=2, head_dim=8, **bad)
    kw = dict(encoder_lens=[4], encoder="write") if bad.get("role") == "cross" else {}
    case = make_case(layer, prefix_lens=[0], new_lens=[5], page_size=4, **kw)
    with pytest.raises(AttnkitError) as err:
        case.reference()
    field = "layer.spec.role" if "role" in bad else "layer.spec.attention_chunk"
    assert err.value.code == "AK419" and err.value.field == field
