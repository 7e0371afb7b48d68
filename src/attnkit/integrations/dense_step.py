"""One transformers attention call as one attnkit step over a paged KV cache.

transformers hands an attention function dense tensors: query ``[B, H, Lq, D]``, key / value
``[B, H_kv, Lk, D]`` (its own cache, already holding this call's keys) and a boolean mask
``[B, 1, Lq, Lk]`` (True = attend) or None. attnkit backends take packed tokens and a paged
cache. ``DenseLayout`` is the bridge, built from the mask alone:

- Per batch row, the keys some query can see are *compacted*: left padding, cache slots not
  yet written and keys older than every query's window are dropped, the rest keep their
  order. Row b then holds ``nk[b]`` keys at positions ``0 .. nk[b]-1`` and its ``nq[b]`` real
  queries are the last ``nq[b]`` of them: one ``Request(prefix_len=nk - nq, num_new=nq)``.
  Padding queries get no token and a zero output: those that see no key (left padding) and
  those whose last visible key an earlier query already ends on (right padding: they do not
  see their own key). Left padding's outputs reach no real token. Right padding's do where
  generate() continues from a row's last position; eager and SDPA attend there, so a warning
  says the logits at those positions differ (pad on the left for generation).
- Dropping a prefix keeps the distances between the remaining keys, so what a backend
  computes from positions (causal, ``p - k < window``) is what the mask says. The layout
  checks that it is, exactly; a mask of any other pattern (packed sequences, padding between
  real tokens, bidirectional blocks) is AK491, never a silently different attention.
- No mask (transformers' "is_causal" shortcut, which it takes only without padding) means
  what SDPA makes of it: one query sees every key; several queries are causal from key 0.

The layout depends on the mask only, so every layer handed the same mask object shares one
layout and the backend's ``prepare`` runs once per layout ("plan once, run many"); each layer
call copies its real keys into a fresh paged cache and runs ``backend.forward``.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field

import torch

from attnkit.backends.base import AttentionBackend, AttentionLayer, StepState
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import fail
from attnkit.kvcache.paged import PagedKVCache

# An additive mask entry at or below this hides its key: exp(-1e4) is 0 in every float format
# (finfo.min, -inf, -1e9 and the classic -10000.0 all count as masked).
MASKED_AT = -1e4
RIGHT_PADDING_WARNING = (
    "attn_implementation='attnkit': padding queries after a row's last real token (right padding) "
    "get a zero attention output, where eager and sdpa attend to the row's keys; logits at those "
    "positions differ, and generate() continues from them: pad on the left for generation")


@dataclass(slots=True)
class DenseLayout:
    """Where one call's dense rows go in the packed step (all index tensors int64).

    q_rows, q_cols:   [T] batch row and query index of each packed query token
    q_keys:           [T] key index (in Lk) of each packed token's own key
    kv_rows, kv_cols: [N] batch row and key index of each compacted key
    kv_slots:         [N] cache slot of each compacted key
    meta: the step's BatchMetadata, None when no row has a real query.
    """
    batch: int
    q_len: int
    page_size: int
    num_pages: int
    q_rows: torch.Tensor
    q_cols: torch.Tensor
    q_keys: torch.Tensor
    kv_rows: torch.Tensor
    kv_cols: torch.Tensor
    kv_slots: torch.Tensor
    meta: BatchMetadata | None
    steps: list = field(default_factory=list)      # [(backend, StepState)], prepared once

    @classmethod
    def of(cls, mask: torch.Tensor | None, *, batch: int, q_len: int, kv_len: int,
           window: int | None, page_size: int, device: torch.device) -> "DenseLayout":
        """mask: [B or 1, 1 or H, Lq, Lk] bool (True = attend) or additive float, or None."""
        if mask is None:
            kvalid, qvalid, own = _unmasked(batch, q_len, kv_len, device)
        else:
            kvalid, qvalid, own = _from_mask(mask, batch=batch, q_len=q_len, kv_len=kv_len,
                                             window=window)
        return cls._build(kvalid, qvalid, own, batch=batch, q_len=q_len, page_size=page_size,
                          device=device)

    @classmethod
    def _build(cls, kvalid, qvalid, own, *, batch, q_len, page_size, device) -> "DenseLayout":
        """kvalid: [B, Lk] bool; qvalid: [B, Lq] bool; own: [B, Lq] int64 key of each query."""
        nk, nq = kvalid.sum(-1).tolist(), qvalid.sum(-1).tolist()
        live = [b for b in range(batch) if nq[b] > 0]
        pages = [-(-nk[b] // page_size) if nq[b] else 0 for b in range(batch)]
        starts = list(itertools.accumulate(pages, initial=0))[:-1]
        reqs = [Request(prefix_len=nk[b] - nq[b], num_new=nq[b],
                        block_table=list(range(starts[b], starts[b] + pages[b]))) for b in live]
        meta = build_batch(reqs, page_size=page_size, device=device) if reqs else None
        cpos = kvalid.long().cumsum(-1) - 1                              # compacted position
        kv_rows, kv_cols = (kvalid & (qvalid.any(-1, keepdim=True))).nonzero(as_tuple=True)
        start_t = torch.tensor(starts, dtype=torch.int64, device=kvalid.device)
        kv_slots = start_t[kv_rows] * page_size + cpos[kv_rows, kv_cols]
        q_rows, q_cols = qvalid.nonzero(as_tuple=True)                   # row-major = step order
        to = dict(device=device, dtype=torch.int64)
        return cls(batch=batch, q_len=q_len, page_size=page_size, num_pages=max(sum(pages), 1),
                   q_rows=q_rows.to(**to), q_cols=q_cols.to(**to), q_keys=own[q_rows, q_cols].to(**to),
                   kv_rows=kv_rows.to(**to), kv_cols=kv_cols.to(**to), kv_slots=kv_slots.to(**to),
                   meta=meta)

    def run(self, backend: AttentionBackend, layer: AttentionLayer, query: torch.Tensor,
            key: torch.Tensor, value: torch.Tensor, *, kv_dtype: torch.dtype) -> torch.Tensor:
        """query: [B, H, Lq, D]; key: [B, H_kv, Lk, D]; value: [B, H_kv, Lk, D_v].
        Returns [B, Lq, H, D_v] in query's dtype (zeros for query rows that see no key)."""
        heads, dv = query.shape[1], value.shape[-1]
        out = query.new_zeros(self.batch, self.q_len, heads, dv)
        if self.meta is None:
            return out
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)   # [B, L, H, D]
        cache = PagedKVCache([layer.spec], num_pages=self.num_pages, page_size=self.page_size,
                             dtype=kv_dtype, device=query.device)
        cache.write(layer.layer_id, self.kv_slots, k[self.kv_rows, self.kv_cols],
                    v[self.kv_rows, self.kv_cols])
        step = self._step(backend, cache)
        att = backend.forward(q[self.q_rows, self.q_cols], k[self.q_rows, self.q_keys],
                              v[self.q_rows, self.q_keys], layer, cache, step)   # [T, H * D_v]
        out[self.q_rows, self.q_cols] = att.view(-1, heads, dv).to(out.dtype)
        return out

    def _step(self, backend: AttentionBackend, cache: PagedKVCache) -> StepState:
        """The backend's per-step state, prepared on the first layer's cache; later layers'
        caches have the same pages, page size, dtype and device."""
        for owner, step in self.steps:
            if owner is backend:
                return step
        step = backend.prepare(self.meta, cache)
        self.steps.append((backend, step))
        return step


def _unmasked(batch: int, q_len: int, kv_len: int, device) -> tuple:
    """No mask: one query sees all Lk keys; Lq > 1 queries are causal from key 0 (SDPA's
    is_causal, which transformers only relies on when there is no padding)."""
    if q_len > kv_len:
        fail("AK491", f"{q_len} queries but only {kv_len} keys and no mask: a causal layer's "
                      "queries are among its keys", field="key.shape[2]", expected=f">= {q_len}",
             actual=kv_len)
    n_keys = kv_len if q_len == 1 else q_len
    kvalid = (torch.arange(kv_len, device=device) < n_keys).expand(batch, kv_len)
    qvalid = torch.ones(batch, q_len, dtype=torch.bool, device=device)
    own = (torch.arange(q_len, device=device) + (n_keys - q_len)).expand(batch, q_len)
    return kvalid, qvalid, own


def _visible(mask: torch.Tensor, batch: int, q_len: int, kv_len: int) -> torch.Tensor:
    """mask -> [B, Lq, Lk] bool. Additive float masks must hold only 0 (attend) and very
    negative values (masked): attnkit adds no bias."""
    if mask.dim() != 4 or mask.shape[-2:] != (q_len, kv_len) or mask.shape[0] not in (1, batch):
        fail("AK491", f"attention_mask has shape {list(mask.shape)}; expected [{batch}, 1, "
                      f"{q_len}, {kv_len}] (boolean, True = attend)", field="attention_mask",
             expected=[batch, 1, q_len, kv_len], actual=list(mask.shape))
    if mask.dtype == torch.bool:
        vis = mask
    elif mask.is_floating_point():
        vis = mask > MASKED_AT
        if bool((mask[vis] != 0).any()):
            fail("AK491", "attention_mask is an additive mask with biases (values other than 0 "
                          f"and <= {MASKED_AT:g}, such as -inf); attnkit backends add no bias: pass "
                          "a boolean mask (True = attend) or a 2D padding mask",
                 field="attention_mask", expected=f"0 or <= {MASKED_AT:g}", actual="other values")
    else:
        fail("AK491", f"attention_mask is a 4D {mask.dtype} tensor; transformers' 4D masks are "
                      "boolean (True = attend) or additive floats (0 / -inf): convert it with "
                      "mask.bool()", field="attention_mask.dtype", expected="bool or float",
             actual=str(mask.dtype))
    if vis.shape[1] > 1 and not bool((vis == vis[:, :1]).all()):
        fail("AK491", "attention_mask differs between heads; attnkit masks every head alike",
             field="attention_mask", expected="one mask for all heads", actual=list(mask.shape))
    return vis[:, 0].expand(batch, q_len, kv_len)


def _from_mask(mask: torch.Tensor, *, batch: int, q_len: int, kv_len: int,
               window: int | None) -> tuple:
    """(kvalid [B, Lk], qvalid [B, Lq], own [B, Lq]) read from the mask, after checking that the
    mask is exactly causal (+ window) over each row's compacted keys."""
    vis = _visible(mask, batch, q_len, kv_len)
    ar = torch.arange(kv_len, device=vis.device)
    own = torch.where(vis, ar, -1).amax(-1)                               # [B, Lq] last key seen
    # A query that sees nothing, or ends on the key an earlier query already ends on, does
    # not see its own key: it is padding (left or right) and gets no token.
    before = torch.nn.functional.pad(own.cummax(-1).values[:, :-1], (1, 0), value=-1)
    qvalid = (own >= 0) & (own != before)                                 # [B, Lq]
    if bool((own >= 0).logical_and_(~qvalid).any()):
        warnings.warn(RIGHT_PADDING_WARNING, UserWarning)
    vis = vis & qvalid[:, :, None]
    kvalid = vis.any(1)                                                   # [B, Lk]
    cpos = kvalid.long().cumsum(-1) - 1
    qpos = cpos.gather(1, own.clamp(min=0))                               # [B, Lq]
    nk, nq = kvalid.sum(-1, keepdim=True), qvalid.sum(-1, keepdim=True)
    rank = qvalid.long().cumsum(-1) - 1
    last = torch.where(qvalid, qpos == nk - nq + rank, True)             # queries are the last keys
    kp, qp = cpos[:, None, :], qpos[:, :, None]
    expected = qvalid[:, :, None] & kvalid[:, None, :] & (kp <= qp)
    if window is not None:
        expected &= kp > qp - window
    if not bool(last.all()) or not torch.equal(expected, vis):
        _mismatch(vis, expected, last, window)
    return kvalid, qvalid, own


def _mismatch(vis: torch.Tensor, expected: torch.Tensor, last: torch.Tensor, window) -> None:
    bad = ((vis != expected).any(-1) | ~last).nonzero()[0].tolist()
    b, i = bad
    seen = vis[b, i].nonzero().flatten().tolist()
    want = expected[b, i].nonzero().flatten().tolist()
    pattern = "causal" + ("" if window is None else f" with sliding window {window}")
    hint = ("real keys must be contiguous after the padding, and the queries must be the row's "
            "last keys")
    if window is not None and want and set(want) < set(seen) and min(seen) < min(want):
        hint = (f"the mask has no sliding window of {window}; transformers hands a custom 4D "
                "attention_mask unchanged to every layer: pass a dict of 4D masks by layer type "
                "({'full_attention': ..., 'sliding_attention': ...}), or a 2D padding mask")
    fail("AK491", f"attention_mask is not a {pattern} mask over each row's real keys: batch row "
                  f"{b}, query {i} sees keys {_short(seen)}, where attnkit would attend "
                  f"{_short(want)} ({hint})", field="attention_mask",
         expected=f"{pattern}, left padding", actual={"row": b, "query": i, "keys": _short(seen)})


def _short(idx: list[int]) -> str:
    return str(idx) if len(idx) <= 8 else f"[{idx[0]} .. {idx[-1]}] ({len(idx)} keys)"
