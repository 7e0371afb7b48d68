"""Pieces shared by the pure-torch backends (torch_native, sdpa): writing a step's K/V,
reading a request's K/V back out of its pages, which keys each query may see, MLA
decompression.

What is the same for every layer of a step (the cache slots each request's keys sit at, the
visibility masks) is built once per step in a ``PagedStep`` and read by every layer.

Visibility (one rule for both backends, matching attnkit.reference): query j of a request
sits at position p = prefix_len + j. Self-attention (decoder, encoder): key k is visible iff
k < kv_len, k <= p if causal (decoder), p - k < w with a sliding window w, and
k // c == p // c with an attention chunk c (chunked local attention). Cross: every
encoder key of the request is visible.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends.step import RuntimeLayer, StepState
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import fail


def write_step_kv(k, v, layer: RuntimeLayer, cache, meta: BatchMetadata) -> None:
    """Store this step's new K/V. Cross layers get the encoder K/V (if any this step) at
    ``meta.encoder_slot_mapping``; every other layer its new tokens at ``meta.slot_mapping``.

    k: [N, H_kv, D] (MLA: latent [N, L + R]); v: [N, H_kv, D_v] (MLA: None)
    """
    if k is None:
        return
    if layer.spec.role == "cross":
        if meta.encoder_slot_mapping is None:
            fail("AK442", f"layer {layer.layer_id}: cross-attention K/V of {k.shape[0]} encoder "
                          "token(s) passed, but meta.encoder_slot_mapping is None",
                 field="meta.encoder_slot_mapping", expected="[sum(encoder_lens)] int64", actual=None)
        cache.store(layer.layer_id, meta.encoder_slot_mapping, k, v)
    else:
        cache.store(layer.layer_id, meta.slot_mapping, k, v)


def kv_source(layer: RuntimeLayer, meta: BatchMetadata):
    """(block tables [B, P] on device, KV length per request as a host list) that ``layer``
    attends over: the encoder's pages for cross layers, the request's own otherwise."""
    if layer.spec.role != "cross":
        return meta.block_tables, meta.seq_lens_cpu
    if meta.encoder_block_tables is None or meta.encoder_lens_cpu is None:
        fail("AK442", f"layer {layer.layer_id} is cross-attention but the step's metadata has "
                      "no encoder pages (encoder_block_tables / encoder_lens_cpu is None)",
             field="meta.encoder_block_tables", expected="[B, Pe] int32", actual=None)
    return meta.encoder_block_tables, meta.encoder_lens_cpu


def read_pages(buf: torch.Tensor, tables: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` token rows of each request's pages.

    buf: [num_pages, page_size, *row]; tables: [B, P] (-1 padded) -> [B, n, *row].
    Padding entries are clamped to page 0, so rows past a request's own length hold whatever
    those slots hold (NaN included): read one request at a time with ``n`` its length, or
    select the extra rows out (``select_out``).
    """
    page_size = buf.shape[1]
    need = -(-n // page_size)
    pages = buf[tables[:, :need].clamp_min(0)]          # [B, need, page_size, *row]
    return pages.flatten(1, 2)[:, :n]


def read_kv(cache, layer: RuntimeLayer, tables: torch.Tensor, n: int, dtype: torch.dtype):
    """K and V (MLA: latent, None) of ``n`` tokens per request, dequantised to ``dtype``.

    -> k [B, n, H_kv, D], v [B, n, H_kv, D_v]; MLA: latent [B, n, L + R], None
    """
    lid = layer.layer_id
    if layer.spec.kind == "mla":
        latent = read_pages(cache.latent[lid], tables, n)
        return cache.dequant(latent, cache.k_scales[lid], dtype), None
    k = read_pages(cache.k[lid], tables, n)
    v = read_pages(cache.v[lid], tables, n)
    return cache.dequant(k, cache.k_scales[lid], dtype), cache.dequant(v, cache.v_scales[lid], dtype)


@dataclass(slots=True)
class KVIndex:
    """Where one step's keys of one KV source (the requests' own pages, or the encoder's) sit
    in a layer's cache buffer viewed as rows [num_pages * page_size, *row].

    slots: [B, need * page_size] int64, need = ceil(kv_max / page_size): the slot of key j of
           request b. Past a request's pages the -1 padding is clamped to page 0, so key rows
           j >= lens[b] hold whatever those slots hold (another request's K/V, a freed
           request's NaN): callers must select them out with ``padding``, not mask their
           logits (a zero weight times NaN is NaN).
    lens:  KV length per request (host list); kv_max = max(lens); any_empty: some length is 0
    padding: [B, kv_max] bool, True at key rows j >= lens[b]; None when no request is shorter
           than kv_max (nothing is padded)
    counts: [B] float32 on the cache's device, max(1, lens[b]): built with the index, so a
           forward that divides by a request's key count copies nothing from the host (a
           captured step cannot)
    """
    slots: torch.Tensor
    lens: list[int]
    kv_max: int
    any_empty: bool
    padding: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    _rows: list | None = None

    @classmethod
    def build(cls, tables: torch.Tensor, lens: list[int], page_size: int) -> "KVIndex":
        """tables: [B, P] block tables (-1 padded); lens: KV length per request."""
        kv_max = max(lens, default=0)
        need = -(-kv_max // page_size)
        dev = tables.device
        pages = tables[:, :need].clamp_min(0).to(torch.int64)                # [B, need]
        offsets = torch.arange(page_size, dtype=torch.int64, device=dev)
        slots = (pages[:, :, None] * page_size + offsets).flatten(1)          # [B, need * ps]
        padding = None
        if any(n != kv_max for n in lens):
            padding = (torch.arange(kv_max, device=dev)[None, :]
                       >= torch.tensor(lens, device=dev)[:, None])             # [B, kv_max]
        counts = torch.tensor([max(1, n) for n in lens], dtype=torch.float32, device=dev)
        return cls(slots, list(lens), kv_max, 0 in lens, padding, counts)

    def request_slots(self, b: int) -> torch.Tensor:
        """[lens[b]] int64: the slots of request b's keys (built for all requests on first use)."""
        if self._rows is None:
            self._rows = [self.slots[i, :n] for i, n in enumerate(self.lens)]
        return self._rows[b]


def gather_kv(cache, layer: RuntimeLayer, slots: torch.Tensor, dtype: torch.dtype):
    """K and V (MLA: latent, None) at ``slots`` [S] or [B, S], dequantised to ``dtype``: the
    rows ``read_kv`` reads, in one index_select per tensor (cheaper to launch than indexing
    with a tensor). -> k [(B,) S, H_kv, D], v [(B,) S, H_kv, D_v]; MLA: latent [(B,) S, L + R], None."""
    lid = layer.layer_id
    if layer.spec.kind == "mla":
        return _dequant(cache, _gather(cache.latent[lid], slots), cache.k_scales[lid], dtype), None
    k = _gather(cache.k[lid], slots)
    v = _gather(cache.v[lid], slots)
    return (_dequant(cache, k, cache.k_scales[lid], dtype),
            _dequant(cache, v, cache.v_scales[lid], dtype))


def select_out(x: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
    """Zero the padded key rows of a gathered batch, in place: x [B, S, ...] (a fresh gather),
    padding [B, S] bool | None. Selected out, whatever the rows held (NaN and inf included)."""
    if padding is not None:
        x.masked_fill_(padding.view(*padding.shape, *(1,) * (x.dim() - 2)), 0)
    return x


def _gather(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Rows ``slots`` ([S] or [B, S]) of buf [num_pages, page_size, *row] -> [(B,) S, *row]."""
    rows = buf.flatten(0, 1).index_select(0, slots.reshape(-1))
    return rows if slots.dim() == 1 else rows.view(*slots.shape, *buf.shape[2:])


def _dequant(cache, x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``cache.dequant``, skipped when x already is ``dtype`` (then the cache is not fp8 and
    the cast is a no-op that would still cost a dispatch per layer)."""
    return x if x.dtype == dtype else cache.dequant(x, scale, dtype)


@dataclass(slots=True)
class PagedStep:
    """One step's per-step state for the pure-torch backends: built empty by ``prepare``,
    filled by the first layer that needs a piece and reused by the rest.

    meta:  the metadata it was built for (``paged_step`` rebuilds it for any other)
    kv:    is-cross -> KVIndex of that KV source
    masks: visibility masks, keyed by what they depend on (each backend its own keys)
    """
    meta: BatchMetadata
    kv: dict = field(default_factory=dict)
    masks: dict = field(default_factory=dict)

    def kv_index(self, layer: RuntimeLayer, page_size: int) -> KVIndex:
        cross = layer.spec.role == "cross"
        if cross not in self.kv:
            tables, lens = kv_source(layer, self.meta)
            self.kv[cross] = KVIndex.build(tables, lens, page_size)
        return self.kv[cross]


def paged_step(step: StepState) -> PagedStep:
    """``step.prepared`` if it is a PagedStep built for ``step.meta``; else a new one, kept in
    ``step.prepared`` (a StepState made without ``prepare``, or one holding another step's state)."""
    plan = step.prepared
    if not isinstance(plan, PagedStep) or plan.meta is not step.meta:
        plan = step.prepared = PagedStep(step.meta)
    return plan


def visibility(layer: RuntimeLayer, q_lens: list[int], kv_lens: list[int],
               first_pos: list[int], *, device: torch.device, q_max: int | None = None,
               kv_max: int | None = None):
    """bool [B, q_max, kv_max]: may query j of request b (at position first_pos[b] + j) see
    key k? None when no mask is needed (every real pair visible, no padding).

    Padded queries (j >= q_lens[b]) see every key so no row is empty; callers drop them.
    """
    q_max = max(q_lens) if q_max is None else q_max
    kv_max = max(kv_lens) if kv_max is None else kv_max
    spec = layer.spec
    window, chunk = local_limits(layer)
    ragged = any(n != kv_max for n in kv_lens)
    local = window is not None or chunk is not None
    if not spec.causal and not local and not ragged:
        return None
    at_end = all(q == 1 and p == n - 1 for q, p, n in zip(q_lens, first_pos, kv_lens))
    if spec.causal and not local and not ragged and at_end:
        return None                                      # one query at the end sees all
    qn = torch.tensor(q_lens, device=device)[:, None, None]
    kvn = torch.tensor(kv_lens, device=device)[:, None, None]
    j = torch.arange(q_max, device=device)[None, :, None]
    k = torch.arange(kv_max, device=device)[None, None, :]
    p = torch.tensor(first_pos, device=device)[:, None, None] + j
    ok = k < kvn
    if spec.causal:
        ok = ok & (k <= p)
    if window is not None:
        ok = ok & (p - k < window)
    if chunk is not None:
        ok = ok & (k // chunk == p // chunk)
    return ok | (j >= qn)


def local_limits(layer: RuntimeLayer) -> tuple[int | None, int | None]:
    """(sliding window, attention chunk) of a self-attention layer; (None, None) for cross
    layers. What a visibility mask depends on besides causality, so masks are memoised by it."""
    spec = layer.spec
    if spec.role == "cross":
        return None, None
    return spec.sliding_window, spec.attention_chunk


def absorbed_is_cheaper(n: int, s: int, mla) -> bool:
    """Is MLA's absorbed form cheaper than decompressing the latent (the MHA form), for n
    queries over s latent rows? FLOPs per head, x2 dropped:
      absorbed      n*nope*L (absorb q) + n*s*(2L + R) (scores, P @ latent) + n*L*D_v (lift)
      decompressed  s*L*(nope + D_v) (per-head K, V) + n*s*(nope + R + D_v) (attention)
    Decode (n = 1) is always absorbed; a long prefill (n near s) decompressed."""
    rank, rope, nope, dv = mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim
    absorbed = n * nope * rank + n * s * (2 * rank + rope) + n * rank * dv
    decompressed = s * rank * (nope + dv) + n * s * (nope + rope + dv)
    return absorbed <= decompressed


def decompress_latent(latent: torch.Tensor, w_kc: torch.Tensor, w_vc: torch.Tensor, rank: int):
    """MHA form of MLA: per-head keys and values from the cached latent.

    latent: [..., S, L + R]; w_kc: [H, nope, L]; w_vc: [H, L, D_v]
    -> k [..., S, H, nope + R] (the rotary part k_pe is shared by all heads), v [..., S, H, D_v]
    """
    lat, k_pe = latent[..., :rank], latent[..., rank:]
    k_nope = torch.einsum("...sl,hdl->...shd", lat, w_kc)
    v = torch.einsum("...sl,hlv->...shv", lat, w_vc)
    k_pe = k_pe.unsqueeze(-2).expand(*k_nope.shape[:-1], k_pe.shape[-1])
    return torch.cat([k_nope, k_pe], dim=-1), v


def begin_forward(k, v, layer: RuntimeLayer, cache, meta: BatchMetadata) -> int:
    """What every pure-torch forward does first (AttentionBackend.forward has checked the layer
    against the declaration): store the step's K/V, and return the value width per head (MLA:
    v_head_dim)."""
    write_step_kv(k, v, layer, cache, meta)
    spec = layer.spec
    return spec.mla.v_head_dim if spec.kind == "mla" else spec.value_dim
