"""DenseLayout: transformers' dense call (mask included) as one attnkit step. Served masks give
the masked-softmax result exactly; masks of any other pattern are AK491."""
import pytest
import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.errors import AttnkitError
from attnkit.integrations.dense_step import DenseLayout
from attnkit.model import LayerAttention
from attnkit.registry import load_backend

H, HKV, D = 4, 2, 8


def causal_mask(pad_left, lengths, q_len, kv_len, *, window=None, pad_right=None):
    """[B, 1, Lq, Lk] bool as transformers builds it: queries are the last Lq key slots (minus
    ``pad_right`` unwritten slots at the end), keys masked before ``pad_left`` and after the
    row's real tokens."""
    rows = []
    for b, (left, n) in enumerate(zip(pad_left, lengths)):
        end = kv_len - (pad_right[b] if pad_right else 0)
        qi = torch.arange(end - q_len, end)[:, None]
        kj = torch.arange(kv_len)[None, :]
        m = (kj <= qi) & (kj >= left) & (kj < left + n)
        if window is not None:
            m &= kj > qi - window
        rows.append(m)
    return torch.stack(rows)[:, None]


def reference(q, k, v, vis, scale):
    """Masked softmax per (row, query) that sees its own key position; others None."""
    kk = k.repeat_interleave(H // HKV, 1)
    vv = v.repeat_interleave(H // HKV, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(), kk.double()) * scale
    s = s.masked_fill(~vis, float("-inf"))
    out = torch.einsum("bhqk,bhkd->bqhd", torch.softmax(s, -1).nan_to_num(), vv.double())
    return out.float()


def run(mask, q_len, kv_len, *, window=None, page_size=4, batch=None, backend="torch_native"):
    batch = batch or mask.shape[0]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, H, q_len, D, generator=g)
    k = torch.randn(batch, HKV, kv_len, D, generator=g)
    v = torch.randn(batch, HKV, kv_len, D, generator=g)
    spec = LayerAttention(layer_id=0, num_heads=H, num_kv_heads=HKV, head_dim=D, scale=0.3,
                          sliding_window=window)
    layout = DenseLayout.of(mask, batch=batch, q_len=q_len, kv_len=kv_len, window=window,
                            page_size=page_size, device=torch.device("cpu"))
    out = layout.run(load_backend(backend), RuntimeLayer(spec), q, k, v,
                     kv_dtype=torch.float32)
    return out, (q, k, v), layout


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("case", ["prefill", "decode", "extend", "static"])
def test_served_masks_give_the_masked_softmax(case, window):
    if case == "prefill":           # left padding, Lq = Lk
        shape, mask = (7, 7), causal_mask([0, 3, 5], [7, 4, 2], 7, 7, window=window)
    elif case == "decode":          # one query over a left-padded cache
        shape, mask = (1, 9), causal_mask([0, 4], [9, 5], 1, 9, window=window)
    elif case == "extend":          # a chunk over a cached prefix
        shape, mask = (3, 8), causal_mask([1, 0], [7, 8], 3, 8, window=window)
    else:                           # a static cache: unwritten slots after the queries
        shape, mask = (2, 10), causal_mask([0, 2], [6, 4], 2, 10, window=window, pad_right=[4, 4])
    out, (q, k, v), layout = run(mask, *shape, window=window)
    want = reference(q, k, v, mask, 0.3)
    rows = mask[:, 0].any(-1)
    torch.testing.assert_close(out[rows], want[rows], rtol=1e-5, atol=1e-5)
    assert (out[~rows] == 0).all()
    assert list(layout.meta.seq_lens_cpu) == [int(n) for n in mask[:, 0].any(1).sum(-1) if n]


def check(mask, q_len, kv_len, *, window=None, page_size=4, backend="torch_native"):
    """The layout's output is the masked softmax for every query that sees a key, zero for
    the others."""
    out, (q, k, v), layout = run(mask, q_len, kv_len, window=window, page_size=page_size,
                                 backend=backend)
    vis = mask[:, :1].expand(-1, 1, -1, -1).bool() if mask.dtype == torch.bool else mask > -1e4
    want = reference(q, k, v, vis[:, :, :, :kv_len], 0.3)
    rows = vis[:, 0, :, :kv_len].any(-1)
    torch.testing.assert_close(out[rows], want[rows], rtol=1e-5, atol=1e-5)
    assert (out[~rows] == 0).all()
    return layout


@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
def test_right_padding_queries_are_exact(backend, recwarn):
    """Padding queries after a row's last token see that row's keys (as eager computes them);
    they were zeros with a warning. One-query requests share the row's pages."""
    mask = causal_mask([0, 0, 1], [6, 3, 2], 6, 6)            # rows 1, 2: padding after the end
    layout = check(mask, 6, 6, backend=backend)
    assert list(layout.meta.seq_lens_cpu) == [6, 3, 3, 3, 3, 2, 2, 2, 2]
    assert not [w for w in recwarn if "padding" in str(w.message)]


@pytest.mark.parametrize("window", [2, 3])
def test_right_padding_under_a_sliding_window_is_exact(window):
    """The padding queries' windows shrink past the row's end: one chain, keys reversed."""
    mask = causal_mask([0, 2], [8, 4], 8, 8, window=window)
    mask[1, 0, 6:, 4:] = False                                # row 1 ends at key 5
    check(mask, 8, 8, window=window)


@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
@pytest.mark.parametrize("q_len, kv_len", [(6, 6), (1, 6), (3, 7)])
def test_bidirectional_masks_are_exact(backend, q_len, kv_len):
    """All-True 4D masks (every query sees every key) were read as one query plus right
    padding: queries 1.. got zeros."""
    mask = torch.ones(2, 1, q_len, kv_len, dtype=torch.bool)
    mask[1, :, :, :2] = False                                 # row 1: 2 padding keys
    check(mask, q_len, kv_len, backend=backend)


def test_bidirectional_blocks_in_a_causal_mask_are_exact():
    """Image tokens that see each other (Gemma 3, PaliGemma's prefix), token_type_ids blocks."""
    mask = causal_mask([0, 1], [10, 9], 10, 10)
    mask[:, :, 3:7, 3:7] = True                               # queries 3..6 see keys 3..6
    mask[1, :, :, 0] = False
    layout = check(mask, 10, 10)
    assert layout.meta.num_reqs == 2 * (2 + 3)                # per row 2 runs, 3 shadows


def test_packed_sequences_are_exact():
    mask = causal_mask([0], [9], 9, 9)
    mask[0, 0, 4:, :4] = False                                # sequences 0..3 and 4..8
    check(mask, 9, 9)
    check(mask & causal_mask([0], [9], 9, 9, window=2), 9, 9, window=2)


def test_chunked_attention_masks_are_exact():
    """Llama 4's chunked local attention: a query sees the keys of its own chunk up to itself
    (transformers' chunked_causal_mask_function), here chunks of 3 over a left-padded row."""
    i = torch.arange(10)
    chunk = (i[:, None] // 3 == i[None, :] // 3) & (i[None, :] <= i[:, None])
    mask = chunk.expand(2, 1, 10, 10).clone()
    mask[1, :, :, :2] = False
    check(mask, 10, 10)


@pytest.mark.parametrize("seed", range(6))
def test_any_boolean_mask_is_exact_or_refused(seed):
    """Random masks: the masked softmax, or AK491; never another result."""
    g = torch.Generator().manual_seed(seed)
    q_len, kv_len = 5, 7
    for density in (0.3, 0.7):
        mask = torch.rand(2, 1, q_len, kv_len, generator=g) < density
        for window in (None, 3):
            try:
                check(mask, q_len, kv_len, window=window)
            except AttnkitError as err:
                assert err.code == "AK491"


def test_copies_are_bounded():
    """A mask that would need the keys copied per query is refused, not a memory blow-up."""
    q_len = kv_len = 40
    mask = ~torch.eye(q_len, dtype=torch.bool)[None, None]    # every key but the query's own
    with pytest.raises(AttnkitError) as err:
        run(mask, q_len, kv_len)
    assert err.value.code == "AK491" and "copied keys" in err.value.message


def test_no_mask_is_sdpa_is_causal():
    for q_len, kv_len in ((5, 5), (1, 6), (3, 8)):           # (3, 8): empty static cache
        out, (q, k, v), _ = run(None, q_len, kv_len, batch=2)
        qi = torch.arange(q_len)[:, None] + (kv_len - 1 if q_len == 1 else 0)
        vis = (torch.arange(kv_len)[None, :] <= qi).expand(2, 1, q_len, kv_len)
        torch.testing.assert_close(out, reference(q, k, v, vis, 0.3), rtol=1e-5, atol=1e-5)


def test_a_hole_is_compacted():
    """Padding between real tokens (right-padded prompt, then generated tokens)."""
    mask = causal_mask([0], [8], 8, 8)
    mask[0, 0, :, 3] = mask[0, 0, 3, :] = False
    assert list(check(mask, 8, 8).meta.seq_lens_cpu) == [7]
    window = causal_mask([0], [8], 8, 8, window=3)            # under a window: distances shift,
    window[0, 0, :, 3] = window[0, 0, 3, :] = False           # chains serve the queries after it
    check(window, 8, 8, window=3)


def test_additive_masks_are_read_like_boolean_ones():
    mask = causal_mask([0, 2], [6, 4], 6, 6)
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    torch.testing.assert_close(run(additive, 6, 6)[0], run(mask, 6, 6)[0])


@pytest.mark.parametrize("bad", ["bias", "nan", "per_head", "integer", "window", "shape"])
def test_other_patterns_are_refused(bad):
    mask = causal_mask([0], [8], 8, 8)
    window = None
    if bad in ("bias", "nan"):
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        mask[0, 0, 5, 1] = 0.5 if bad == "bias" else float("nan")
    elif bad == "per_head":
        mask = mask.expand(1, H, 8, 8).clone()
        mask[0, 1, 4, 0] = False
    elif bad == "integer":                                    # eager would add 0/1 as a bias
        mask = mask.long()
    elif bad == "window":                                     # mask has no window, the layer has
        window = 3
    else:
        mask = mask[:, :, :, :7]
    with pytest.raises(AttnkitError) as err:
        run(mask, 8, 8, window=window)
    assert err.value.code == "AK491"
    if bad == "window":
        assert "no sliding window of 3" in err.value.message


def test_a_mask_longer_than_the_keys_is_cut_to_them():
    """As eager (transformers 4.55) slices attention_mask[..., :Lk]."""
    mask = torch.cat([causal_mask([0, 2], [6, 4], 6, 6), torch.ones(2, 1, 6, 3, dtype=torch.bool)], -1)
    check(mask, 6, 6)
