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

import torch
import triton

from attnkit.backends.base import (AttentionBackend, RuntimeLayer, StepState, check_int_option,
                                   check_kernel_tables, check_option)
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends._triton import interpreting
from attnkit.backends.triton_mla._parts import Part, build_parts, static_parts
from attnkit.backends.triton_mla.declaration import DECLARATION
from attnkit.backends.triton_mla.decode import (KERNEL_OF, PLAN_NAMES, VARIANT_NAMES, VARIANTS,
                                                absorbed_attention, absorbed_config, choose_splits)
from attnkit.backends.triton_mla.decode_column_split import absorbed_config_v2, v2_block_h
from attnkit.backends.triton_mla.extend import mha_form_attention
from attnkit.errors import fail
from attnkit.registry.kernels import KernelTable, step_point

_CAPS = DECLARATION.capabilities
_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_KV_DTYPES = _DTYPES | {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}
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
    of the latent per head block, 1 or 2)."""

    name = "triton_mla"

    def __init__(self, *, kernels=None, num_splits: int | None = None, block_h: int | None = None,
                 block_n: int | None = None, num_warps: int | None = None,
                 num_stages: int | None = None, mha_form_min_query: int | None = None,
                 extend_tiles: tuple[int, int, int, int] | None = None,
                 variant: str | None = None, v_split: int | None = None):
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

    def _absorbed_kernel(self, meta: BatchMetadata, part: Part) -> str:
        """The absorbed kernel the plan lists first for the absorbed part of this step."""
        if self.variant is not None:
            return self.variant
        names = self._table(meta).candidates(*step_point(part.query_lens, part.kv_lens,
                                                         max_kv=part.static_kv))
        return next((KERNEL_OF[n] for n in names if n in KERNEL_OF), "v2")

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """A static decode step: every request absorbed (one new token each), splits sized
        for ``max_seq_len``; the kernels find each request's KV length on the device."""
        return StepState(meta=meta, prepared=static_parts(meta, max_seq_len))

    # ---- per layer ------------------------------------------------------------------------
    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, H, nope + rope]; k: latent [T, L + R]; v: None. Returns [T, H * v_head_dim]."""
        spec, meta = layer.spec, step.meta
        mla = self._check(q, k, v, layer, cache)
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
                                     variant=self._absorbed_kernel(meta, part))
            if part.tokens is None:
                out = res
            else:
                out = q.new_empty(T, H, mla.v_head_dim) if out is None else out
                out[part.tokens] = res
        return out.reshape(T, H * mla.v_head_dim)

    def _absorbed(self, q_nope, q_pe, latent, layer, part: Part, kv_scale, *, variant: str):
        """q_nope: [T, H, nope]; q_pe: [T, H, R]; latent: [pages, page_size, L + R] -> [T, H, Dv]."""
        q_lat = torch.bmm(q_nope.transpose(0, 1), layer.w_kc.to(q_nope.dtype))       # [H, T, L]
        out_lat = self._attend_latent(q_lat, q_pe, latent, layer, part, kv_scale, variant=variant)
        return torch.bmm(out_lat.transpose(0, 1), layer.w_vc.to(q_nope.dtype)).transpose(0, 1)

    def attend_latent(self, q_lat, q_pe, latent, layer: RuntimeLayer, step: StepState, *,
                      kv_scale: float = 1.0):
        """The absorbed attention core alone, for a step whose requests all take the absorbed
        form (benchmarks time it apart from the projections).

        q_lat: [H, T, L]; q_pe: [T, H, R]; latent: [pages, page_size, L + R] -> out_lat [T, H, L]."""
        return self._attend_latent(q_lat, q_pe, latent, layer, step.prepared["absorbed"], kv_scale,
                                   variant=self._absorbed_kernel(step.meta, step.prepared["absorbed"]))

    def _attend_latent(self, q_lat, q_pe, latent, layer, part: Part, kv_scale: float, *, variant: str):
        H = q_lat.shape[0]
        fp32 = q_lat.dtype == torch.float32
        rows = 16 if fp32 else 64         # fp32 tiles are twice the bytes: keep them small
        kw = dict(fp32=fp32, smem_kb=_smem_kb(q_lat.device))
        v2_tiles = variant in ("v2", "tma")       # tma runs v2's program shapes
        wide = v2_block_h(H, layer.spec.mla.kv_lora_rank, **kw) if v2_tiles else None
        block_h = self.block_h or wide or min(rows, max(16, triton.next_power_of_2(H)))
        block_t = max(1, min(triton.next_power_of_2(part.max_query_len), rows // block_h))
        args = (block_h * block_t, layer.spec.mla.kv_lora_rank)
        cfg = (absorbed_config_v2(*args, **kw) if v2_tiles else None) \
            or dict(absorbed_config(*args, **kw), v_split=1)
        cfg.update({k: v for k, v in (("block_n", self.block_n), ("num_warps", self.num_warps),
                                      ("num_stages", self.num_stages),
                                      ("v_split", self.v_split if v2_tiles else None))
                    if v})
        per_sm = cfg.pop("programs_per_sm")
        work_req, work_tok = part.tiles(block_t)
        splits = self.num_splits or choose_splits(
            work_req.numel() * triton.cdiv(H, block_h) * cfg["v_split"], part.max_kv_len,
            slots=_sm_count(q_lat.device) * per_sm)
        return absorbed_attention(
            q_lat, q_pe, latent.view(-1, latent.shape[-1]), part.block_tables, work_req,
            work_tok, part.query_start_loc, part.seq_lens,
            page_size=part.page_size, scale=layer.spec.softmax_scale, kv_scale=kv_scale,
            block_t=block_t, block_h=block_h, num_splits=splits, variant=variant, **cfg)

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
        on_gpu = q_nope.is_cuda and not interpreting()
        # (block_m, block_n, warps, stages): no spills and pipelined loads with ptxas for
        # sm_90 (144 KB of shared memory); 32-key tiles (68 KB) where blocks get ~99 KB
        wide = (64, 64, 4, 3) if _smem_kb(q_nope.device) >= 160 else (64, 32, 4, 3)
        tiles = (32, 32, 4, 2) if dtype == torch.float32 else wide
        block_m, block_n, warps, stages = self.extend_tiles or (tiles if on_gpu else (16, 16, 4, 1))
        work_req, work_tok = part.tiles(block_m)
        return mha_form_attention(
            q_nope, q_pe, k_nope, k_pe, v, work_req, work_tok, part.query_start_loc,
            kv_start, scale=layer.spec.softmax_scale, block_m=block_m, block_n=block_n,
            num_warps=warps, num_stages=stages)

    # ---- checks ---------------------------------------------------------------------------
    def _check(self, q, k, v, layer: RuntimeLayer, cache):
        """Everything the declaration says, as AttnkitErrors in AK460-AK466."""
        spec = layer.spec
        mla = spec.mla
        if spec.kind != "mla" or mla is None or layer.w_kc is None or layer.w_vc is None:
            fail("AK460", f"layer {spec.layer_id} is kind {spec.kind!r}; triton_mla needs an MLA "
                 "layer with w_kc and w_vc", field="layer.kind", expected="mla", actual=spec.kind)
        dims = (mla.kv_lora_rank, mla.qk_rope_head_dim)
        if dims not in _CAPS.mla_dims:
            fail("AK461", f"(kv_lora_rank, qk_rope_head_dim) = {dims} is not served by triton_mla",
                 field="mla_dims", expected=_CAPS.mla_dims, actual=dims)
        bad = sorted(spec.features() - _CAPS.features)     # what the declaration lacks, all of it
        if bad or not spec.causal:
            fail("AK464", f"layer {spec.layer_id} needs {sorted(bad) or ['non_causal']}",
                 field="features", expected=sorted(_CAPS.features), actual=sorted(bad))
        if not q.is_cuda and not interpreting():
            fail("AK465", f"q is on {q.device}; triton_mla runs on CUDA",
                 field="device", expected="cuda", actual=str(q.device))
        dt, kv_dt = _DTYPES.get(q.dtype), _KV_DTYPES.get(cache.dtype)
        if dt not in _CAPS.dtypes or kv_dt not in _CAPS.kv_cache_dtypes or k.dtype != q.dtype:
            fail("AK462", f"q {q.dtype}, latent {k.dtype}, cache {cache.dtype} not served",
                 field="dtype", expected={"dtypes": _CAPS.dtypes, "kv_cache_dtypes": _CAPS.kv_cache_dtypes},
                 actual={"q": str(q.dtype), "k": str(k.dtype), "cache": str(cache.dtype)})
        if cache.page_size not in _CAPS.page_sizes:
            fail("AK463", f"page size {cache.page_size} is not served by triton_mla",
                 field="page_size", expected=_CAPS.page_sizes, actual=cache.page_size)
        H, L, R = spec.num_heads, mla.kv_lora_rank, mla.qk_rope_head_dim
        want = {"q": (q.shape[0], H, mla.qk_nope_head_dim + R), "k": (q.shape[0], L + R),
                "w_kc": (H, mla.qk_nope_head_dim, L), "w_vc": (H, L, mla.v_head_dim)}
        got = {"q": tuple(q.shape), "k": tuple(k.shape), "w_kc": tuple(layer.w_kc.shape),
               "w_vc": tuple(layer.w_vc.shape)}
        if want != got or v is not None:
            fail("AK466", f"MLA shapes {got} (v={'set' if v is not None else None}) differ from "
                 f"{want} (v=None)", field="shapes", expected=want, actual=got)
        return mla
