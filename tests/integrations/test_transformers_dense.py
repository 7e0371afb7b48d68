"""DenseLayout: transformers' dense call (mask included) as one attnkit step. Served masks give
the masked-softmax result exactly; masks of any other pattern are AK491."""
import pytest
import torch

from attnkit.backends.base import AttentionLayer
from attnkit.errors import AttnkitError
from attnkit.integrations.dense_step import DenseLayout
from attnkit.model import LayerAttention
from attnkit.planning.registry import load_backend

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


def run(mask, q_len, kv_len, *, window=None, page_size=4, batch=None):
    batch = batch or mask.shape[0]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, H, q_len, D, generator=g)
    k = torch.randn(batch, HKV, kv_len, D, generator=g)
    v = torch.randn(batch, HKV, kv_len, D, generator=g)
    spec = LayerAttention(layer_id=0, num_heads=H, num_kv_heads=HKV, head_dim=D, scale=0.3,
                          sliding_window=window)
    layout = DenseLayout.of(mask, batch=batch, q_len=q_len, kv_len=kv_len, window=window,
                            page_size=page_size, device=torch.device("cpu"))
    out = layout.run(load_backend("torch_native"), AttentionLayer(spec), q, k, v,
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


def test_right_padding_queries_get_zeros_and_a_warning():
    mask = causal_mask([0, 0], [6, 3], 6, 6)                 # row 1: tokens 0-2, then padding
    with pytest.warns(UserWarning, match="right padding"):
        out, (q, k, v), layout = run(mask, 6, 6)
    want = reference(q, k, v, mask, 0.3)
    torch.testing.assert_close(out[1, :3], want[1, :3], rtol=1e-5, atol=1e-5)
    assert (out[1, 3:] == 0).all() and list(layout.meta.seq_lens_cpu) == [6, 3]


def test_no_mask_is_sdpa_is_causal():
    for q_len, kv_len in ((5, 5), (1, 6), (3, 8)):           # (3, 8): empty static cache
        out, (q, k, v), _ = run(None, q_len, kv_len, batch=2)
        qi = torch.arange(q_len)[:, None] + (kv_len - 1 if q_len == 1 else 0)
        vis = (torch.arange(kv_len)[None, :] <= qi).expand(2, 1, q_len, kv_len)
        torch.testing.assert_close(out, reference(q, k, v, vis, 0.3), rtol=1e-5, atol=1e-5)


def test_a_hole_without_window_is_compacted():
    """Padding between real tokens (right-padded prompt, then generated tokens) is served
    where no window makes the distances matter."""
    mask = causal_mask([0], [8], 8, 8)
    mask[0, 0, :, 3] = mask[0, 0, 3, :] = False
    out, (q, k, v), layout = run(mask, 8, 8)
    rows = torch.arange(8) != 3
    torch.testing.assert_close(out[0, rows], reference(q, k, v, mask, 0.3)[0, rows],
                               rtol=1e-5, atol=1e-5)
    assert list(layout.meta.seq_lens_cpu) == [7]


def test_additive_masks_are_read_like_boolean_ones():
    mask = causal_mask([0, 2], [6, 4], 6, 6)
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    torch.testing.assert_close(run(additive, 6, 6)[0], run(mask, 6, 6)[0])


@pytest.mark.parametrize("bad", ["bias", "per_head", "packed", "middle_padding", "window",
                                 "shape"])
def test_other_patterns_are_refused(bad):
    mask = causal_mask([0], [8], 8, 8)
    window = None
    if bad == "bias":
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        mask[0, 0, 5, 1] = 0.5
    elif bad == "per_head":
        mask = mask.expand(1, H, 8, 8).clone()
        mask[0, 1, 4, 0] = False
    elif bad == "packed":                                     # two sequences in one row
        mask[0, 0, 4:, :4] = False
    elif bad == "middle_padding":             # a hole under a window: compacting shifts distances
        window = 3
        mask = causal_mask([0], [8], 8, 8, window=window)
        mask[0, 0, :, 3] = mask[0, 0, 3, :] = False
    elif bad == "window":                                     # mask has no window, the layer has
        window = 3
    else:
        mask = mask[:, :, :, :7]
    with pytest.raises(AttnkitError) as err:
        run(mask, 8, 8, window=window)
    assert err.value.code == "AK491"
