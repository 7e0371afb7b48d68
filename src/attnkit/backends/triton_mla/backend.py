"""TritonMLABackend: MLA attention over the paged latent cache with Triton kernels.

Per step ``prepare`` turns the batch metadata into int32 index tensors once; per layer
``forward`` writes the new latent rows, then runs one of two forms:
- absorbed (decode, verify, short extends): q_lat = q_nope @ w_kc[h] (torch bmm), the Triton
  split-KV kernel attends against the latent cache with one KV head for all query heads,
  out = out_lat @ w_vc[h] (torch bmm);
- MHA form: the latent of a request's KV is gathered and decompressed into per-head K/V by
  one GEMM each, then a causal Triton flash-attention kernel runs over them.
Which form a request of a prefill / extend step takes, and which absorbed kernel runs, is the
plan's choice (its kernel tables, ``kernels``: variants mha_form, column_split, whole_rows,
column_split_tma, ws; declaration.py); a MIXED step runs each request in its own form
(_parts.py). Without tables the first variant that can, in declaration order, runs.
"""
from __future__ import annotations

import warnings

import torch
import triton

from attnkit.backends.base import (AttentionBackend, RuntimeLayer, StepState, check_int_option,
                                   check_kernel_tables, check_option)
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends._triton import interpreting
from attnkit.backends.triton_mla._parts import Part, build_parts, static_parts
from attnkit.backends.triton_mla.declaration import DECLARATION
from attnkit.backends.triton_mla import configs
from attnkit.backends.triton_mla.decode import (KERNEL_OF, PLAN_NAMES, VARIANT_NAMES, VARIANTS,
                                                absorbed_attention, choose_splits, fuses_merge,
                                                ws_ready)
from attnkit.backends.triton_mla.decode_tma import tma_ready
from attnkit.backends.triton_mla.extend import mha_form_attention
from attnkit.errors import fail
from attnkit.registry.kernels import KernelTable, step_point

def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def _smem_kb(device: torch.device) -> int:
    """Shared memory a block may opt into, KB (the device's own figure: geometry, not a
    benchmark); tile shapes that fit sm_80 / sm_90 do not fit the ~99 KB of sm_86 / sm_89."""
    if device.type != "cuda":
        return 227
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin // 1024


def _pdl_ok(device: torch.device) -> bool:
    """Programmatic dependent launch: a compiled launch on an sm_90+ GPU."""
    return device.type == "cuda" and not interpreting() and torch.cuda.get_device_capability(device)[0] >= 9


DEFAULT_TABLES = {role: KernelTable(role, fallback=tuple(k.name for k in DECLARATION.variants_for(role)))
                  for role in ("prefill", "extend", "decode")}


class TritonMLABackend(AttentionBackend):
    """Options (keyword-only): ``kernels``, the plan's kernel tables ({role: KernelTable},
    Plan.run.backend_options); ``variant`` to run one absorbed kernel ("v1" / "v2" / "tma" /
    "ws", or "whole_rows" / "column_split" / "column_split_tma"); ``mha_form_min_query``
    (new tokens from which a request takes the MHA form; None: the kernel tables decide);
    launch overrides for tests and benchmarks: ``num_splits`` (KV splits per tile),
    ``block_h``, ``block_n``, ``num_warps``, ``num_stages``, ``extend_tiles`` (block_m,
    block_n, num_warps, num_stages of the MHA-form kernel), ``v_split`` (v2: column blocks
    of the latent per head block, 1 or 2), ``pdl`` (v2 with splits on sm_90+: the reduce
    kernel launched as a programmatic dependent of the split kernel), ``merge_splits`` (v2:
    with 2 up to that many KV splits the split kernel merges them itself, no reduce launch;
    0 never; None: the tile's, configs.V2_MERGE_SPLITS), ``ws_config`` (ws: overrides of
    configs.WS's BLOCK_N, NUM_STAGES, AHEAD, OUT16; configs.ws_tile refuses what cannot run)."""

    name = "triton_mla"
    declaration = DECLARATION

    def __init__(self, *, kernels=None, num_splits: int | None = None, block_h: int | None = None,
                 block_n: int | None = None, num_warps: int | None = None,
                 num_stages: int | None = None, mha_form_min_query: int | None = None,
                 extend_tiles: tuple[int, int, int, int] | None = None,
                 variant: str | None = None, v_split: int | None = None, pdl: bool = False,
                 merge_splits: int | None = None, ws_config: dict | None = None):
        for option, value, pow2 in (("num_splits", num_splits, False), ("block_h", block_h, True),
                                    ("block_n", block_n, True), ("num_stages", num_stages, False)):
            check_int_option(self.name, option, value, power_of_two=pow2)
        check_int_option(self.name, "num_warps", num_warps, power_of_two=True, maximum=32)
        check_int_option(self.name, "mha_form_min_query", mha_form_min_query, minimum=0)
        if extend_tiles is not None:
            if not isinstance(extend_tiles, (tuple, list)) or len(extend_tiles) != 4:
                fail("AK407", f"triton_mla: extend_tiles must be (block_m, block_n, num_warps, num_stages), "
                              f"got {extend_tiles!r}", field="extend_tiles", expected="4 ints",
                     actual=repr(extend_tiles))
            for option, value in zip(("block_m", "block_n", "num_warps"), extend_tiles):
                check_int_option(self.name, f"extend_tiles.{option}", value, power_of_two=True)
            check_int_option(self.name, "extend_tiles.num_stages", extend_tiles[3])
        self.num_splits = num_splits
        self.block_h = block_h
        self.block_n = block_n
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.mha_form_min_query = mha_form_min_query
        self.extend_tiles = extend_tiles
        self.variant = None if variant == "auto" else VARIANT_NAMES.get(variant, variant)
        check_option(self.name, "variant", self.variant, (None, *VARIANTS, *VARIANT_NAMES))
        self.kernels = check_kernel_tables(self.name, kernels, DECLARATION)
        check_option(self.name, "v_split", v_split, (None, 1, 2))
        self.v_split = v_split
        check_option(self.name, "pdl", pdl, (False, True))
        self.pdl = pdl
        check_int_option(self.name, "merge_splits", merge_splits, minimum=0)
        self.merge_splits = merge_splits
        self.ws_tile = configs.ws_tile(ws_config)

    # ---- per step -------------------------------------------------------------------------
    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        return StepState(meta=meta, prepared=build_parts(meta, cache.device, self._mha_requests(meta)))

    def _table(self, meta: BatchMetadata) -> KernelTable:
        role = ("decode" if meta.mode is ForwardMode.DECODE else
                "prefill" if meta.mode is ForwardMode.EXTEND and not any(meta.prefix_lens_cpu) else "extend")
        return self.kernels.get(role) or DEFAULT_TABLES[role]

    def _mha_requests(self, meta: BatchMetadata) -> list[bool]:
        """Per request, whether it takes the MHA form: the plan's first variant for a step of
        its own shape (in this step's batch), or ``mha_form_min_query`` where given."""
        qlens, kvlens = list(meta.query_lens_cpu), list(meta.seq_lens_cpu)
        if self.mha_form_min_query is not None:
            return [n >= self.mha_form_min_query for n in qlens]
        if meta.mode is ForwardMode.DECODE:
            return [False] * len(qlens)
        table = self._table(meta)
        return [table.candidates(len(qlens), n, kv)[0] == "mha_form" for n, kv in zip(qlens, kvlens)]

    def _absorbed_kernels(self, meta: BatchMetadata, part: Part) -> tuple[str, ...]:
        """The absorbed kernels for the absorbed part of this step, in the plan's order (its
        nearest bucket's, fastest first), then the general ones (v2, v1) every call can take;
        the ``variant`` option alone where given, then its general kernel."""
        if self.variant is not None:
            return (self.variant, FALLBACK[self.variant])
        names = self._table(meta).candidates(*step_point(part.query_lens, part.kv_lens,
                                                         max_kv=part.static_kv))
        return tuple(dict.fromkeys([KERNEL_OF[n] for n in names if n in KERNEL_OF] + ["v2", "v1"]))

    def static_reaches(self, batch: int, max_seq_len: int) -> tuple[int, ...]:
        """Where the plan's decode table changes its first variant below ``max_seq_len`` (the
        ``variant`` option: one kernel everywhere)."""
        if self.variant is not None:
            return (max_seq_len,)
        return (self.kernels.get("decode") or DEFAULT_TABLES["decode"]).reaches(batch, 1, max_seq_len)

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """A static decode step: every request absorbed (one new token each), splits sized
        for ``max_seq_len``; the kernels find each request's KV length on the device. Where v2
        may merge its splits itself, its tickets are allocated (zeroed) now, outside the graph:
        a token's tile x head blocks of >= 16 heads (a decode program's fewest) of the cache's
        widest layer."""
        parts = static_parts(meta, max_seq_len)
        if (configs.V2_MERGE_SPLITS if self.merge_splits is None else self.merge_splits) > 1:
            heads = max(spec.num_heads for spec in cache.specs.values())
            parts["absorbed"].merge_counters(meta.num_reqs * triton.cdiv(heads, 16))
        return StepState(meta=meta, prepared=parts)

    # ---- per layer ------------------------------------------------------------------------
    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, H, nope + rope]; k: latent [T, L + R]; v: None. Returns [T, H * v_head_dim]."""
        spec, meta = layer.spec, step.meta
        mla = spec.mla
        T, H = q.shape[0], q.shape[1]
        if T == 0:
            return q.new_empty(0, H * mla.v_head_dim)
        cache.store(spec.layer_id, meta.slot_mapping, k, None)
        nope = mla.qk_nope_head_dim
        q = q if q.stride(-1) == 1 else q.contiguous()
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        kv_scale = float(cache.k_scales[spec.layer_id]) if cache.is_fp8 else 1.0
        latent = cache.latent[spec.layer_id]
        out = None
        for form, part in step.prepared.items():
            qn, qp = (q_nope, q_pe) if part.tokens is None else (q_nope[part.tokens], q_pe[part.tokens])
            if form == "mha":
                res = self._mha_form(qn, qp, latent, layer, cache, part, kv_scale)
            else:
                res = self._absorbed(qn, qp, latent, layer, part, kv_scale,
                                     kernels=self._absorbed_kernels(meta, part))
            if part.tokens is None:
                out = res
            else:
                out = q.new_empty(T, H, mla.v_head_dim) if out is None else out
                out[part.tokens] = res
        return out.reshape(T, H * mla.v_head_dim)

    def _absorbed(self, q_nope, q_pe, latent, layer, part: Part, kv_scale, *, kernels):
        """q_nope: [T, H, nope]; q_pe: [T, H, R]; latent: [pages, page_size, L + R] -> [T, H, Dv]."""
        q_lat = torch.bmm(q_nope.transpose(0, 1), layer.w_kc.to(q_nope.dtype))       # [H, T, L]
        out_lat = self._attend_latent(q_lat, q_pe, latent, layer, part, kv_scale, kernels=kernels)
        w_vc = layer.w_vc.to(q_nope.dtype)
        if q_nope.shape[0] == 1:            # [H, 1, Dv] is already token-major once transposed
            return torch.bmm(out_lat.transpose(0, 1), w_vc).transpose(0, 1)
        # more tokens: written token-major through a transposed view (cuBLAS takes its strides),
        # so the caller's reshape to [T, H * Dv] is a view, not a copy kernel (the GPU profile's
        # last kernel of a forward at B > 1; NOTES-mla.md version 7)
        out = q_nope.new_empty(q_nope.shape[0], q_nope.shape[1], w_vc.shape[-1])
        torch.bmm(out_lat.transpose(0, 1), w_vc, out=out.transpose(0, 1))
        return out

    def attend_latent(self, q_lat, q_pe, latent, layer: RuntimeLayer, step: StepState, *,
                      kv_scale: float = 1.0):
        """The absorbed attention core alone, for a step whose requests all take the absorbed
        form (benchmarks time it apart from the projections).

        q_lat: [H, T, L]; q_pe: [T, H, R]; latent: [pages, page_size, L + R] -> out_lat [T, H, L]."""
        part = step.prepared["absorbed"]
        return self._attend_latent(q_lat, q_pe, latent, layer, part, kv_scale,
                                   kernels=self._absorbed_kernels(step.meta, part))

    def absorbed_tiles(self, variant: str, *, heads: int, latent_width: int, new_tokens: int,
                       fp32: bool, device) -> dict:
        """The tile ``variant`` (a kernel code: v1 / v2 / tma / ws) launches with: configs.py's
        (what the plan names) for this layer and device, then this backend's overrides."""
        cfg = configs.absorbed_tiles(PLAN_NAMES[variant], heads=heads, latent_width=latent_width,
                                     new_tokens=new_tokens, fp32=fp32, smem_kb=_smem_kb(device),
                                     block_h=self.block_h)
        columns = variant in ("v2", "tma")
        cfg.update({k: v for k, v in (("block_n", self.block_n), ("num_warps", self.num_warps),
                                      ("num_stages", self.num_stages),
                                      ("v_split", self.v_split if columns else None)) if v})
        if variant == "v2" and self.merge_splits is not None:
            cfg["merge_splits"] = self.merge_splits
        if variant == "ws":
            cfg["ws_tile"] = self.ws_tile
        return cfg

    def _attend_latent(self, q_lat, q_pe, latent, layer, part: Part, kv_scale: float, *, kernels):
        H = q_lat.shape[0]
        flat = latent.view(-1, latent.shape[-1])
        for variant in kernels:      # the first that can take this call (RUNNABLE)
            cfg = self.absorbed_tiles(variant, heads=H, latent_width=layer.spec.mla.kv_lora_rank,
                                      new_tokens=part.max_query_len,
                                      fp32=q_lat.dtype == torch.float32, device=q_lat.device)
            if RUNNABLE[variant](q_lat, flat, part, cfg):
                break
        if self.variant is not None and variant != self.variant:     # an explicit choice: said
            warnings.warn(f"triton_mla: variant {PLAN_NAMES[self.variant]!r} cannot run this call "
                          f"({RUNNABLE_NEEDS[self.variant]}); running {PLAN_NAMES[variant]!r}",
                          UserWarning, stacklevel=2)
        block_h, block_t = cfg.pop("block_h"), cfg.pop("block_t")
        per_sm = cfg.pop("programs_per_sm")
        work_req, work_tok = part.tiles(block_t)
        splits = self.num_splits or choose_splits(
            work_req.numel() * triton.cdiv(H, block_h) * cfg["v_split"], part.max_kv_len,
            slots=_sm_count(q_lat.device) * per_sm)
        fused = fuses_merge(variant, splits, cfg.get("merge_splits", 0))
        return absorbed_attention(
            q_lat, q_pe, flat, part.block_tables, work_req,
            work_tok, part.query_start_loc, part.seq_lens,
            page_size=part.page_size, scale=layer.spec.softmax_scale, kv_scale=kv_scale,
            block_t=block_t, block_h=block_h, num_splits=splits, variant=variant,
            pdl=self.pdl and _pdl_ok(q_lat.device),
            counters=part.merge_counters(work_req.numel() * triton.cdiv(H, block_h)) if fused else None,
            **cfg)

    def _mha_form(self, q_nope, q_pe, latent, layer, cache, part: Part, kv_scale):
        """Decompress the gathered latent into per-head K/V, then causal flash attention."""
        H, dtype = q_nope.shape[1], q_nope.dtype
        mla = layer.spec.mla
        L = mla.kv_lora_rank
        kv_start, slots = part.gather()
        lat = latent.view(-1, latent.shape[-1])[slots]
        lat = lat.float().mul_(kv_scale).to(dtype) if cache.is_fp8 else lat.to(dtype)
        c, k_pe = lat[:, :L], lat[:, L:]
        w_kc = layer.w_kc.to(dtype).reshape(H * mla.qk_nope_head_dim, L)
        w_vc = layer.w_vc.to(dtype).transpose(0, 1).reshape(L, H * mla.v_head_dim)
        k_nope = (c @ w_kc.T).view(-1, H, mla.qk_nope_head_dim)                      # [S, H, nope]
        v = (c @ w_vc).view(-1, H, mla.v_head_dim)                                  # [S, H, Dv]
        tiles = configs.mha_form_tiles(fp32=dtype == torch.float32, smem_kb=_smem_kb(q_nope.device),
                                       interpret=not q_nope.is_cuda or interpreting())
        block_m, block_n, warps, stages = self.extend_tiles or tuple(tiles.values())
        work_req, work_tok = part.tiles(block_m)
        return mha_form_attention(
            q_nope, q_pe, k_nope, k_pe, v, work_req, work_tok, part.query_start_loc,
            kv_start, scale=layer.spec.softmax_scale, block_m=block_m, block_n=block_n,
            num_warps=warps, num_stages=stages)


# What each absorbed kernel needs of a call beyond its declaration (a plan made for this device
# has checked the envelope): tma a 16-bit cache of q's dtype and key tiles inside one page; ws
# the Triton and device its Gluon code is written for. v1 and v2 take every call.
RUNNABLE = {
    "v1": lambda q_lat, flat, part, cfg: True,
    "v2": lambda q_lat, flat, part, cfg: True,
    "tma": lambda q_lat, flat, part, cfg: tma_ready(q_lat, flat, page_size=part.page_size,
                                                    block_h=cfg["block_h"], block_n=cfg["block_n"]),
    "ws": lambda q_lat, flat, part, cfg: ws_ready(q_lat, flat, page_size=part.page_size,
                                                  block_t=cfg["block_t"], block_h=cfg["block_h"],
                                                  block_n=cfg["ws_tile"]["BLOCK_N"]),
}
RUNNABLE_NEEDS = {"tma": "it needs a cache of q's 16-bit dtype and key tiles inside one page",
                  "ws": "it needs a compiled sm_90 launch with the Triton its Gluon code is written for, "
                        "bf16, 64-head programs over 64-key pages"}
FALLBACK = {"v1": "v1", "v2": "v2", "tma": "v2", "ws": "v1"}   # a forced variant that cannot run
