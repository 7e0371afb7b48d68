"""TritonBackend: paged MHA/GQA/MQA attention with the extend and split-KV decode kernels.

Per step ``prepare`` turns the batch metadata into int32 index tensors once and memoises
what depends on a layer's shape (query-block tables per block size, split counts and
partial buffers per KV-head count): the first layer builds them, the others reuse them.
Per layer ``forward`` writes the new K/V into the cache, then runs extend
(EXTEND / MIXED / VERIFY) or decode (DECODE); IDLE returns an empty output. Which kernel
variant runs (declaration.py: split / split_write / split_merge / split_fixed for decodes;
paged / paged_new_kv / tma / gluon / gluon_rows / gluon_rows_persistent / paged_fixed for
prefills and extends) is the plan's choice: the backend is
handed the plan's kernel tables (``kernels``) and per step runs the first variant listed for
the nearest measured bucket that can take the step (registry/kernels.py). Without tables it
runs the first that can, in declaration order.
Inputs are validated by AttentionBackend.forward (base.py: shapes, and the layer against this
backend's declaration) before ``_forward`` runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import torch

from attnkit.backends.base import (AttentionBackend, RuntimeLayer, StepState, check_int_option,
                                   check_kernel_tables, check_launch_config, check_option)
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends._triton import interpreting, kernel_scales, padded_dim, write_kv
from attnkit.backends.triton.declaration import DECLARATION
from attnkit.backends.triton import decode as decode_kernels
from attnkit.backends.triton import extend as extend_kernels
from attnkit.backends.triton import varlen_path
from attnkit.backends.triton.decode import (choose_splits, decode_attention, decode_config,
                                             decode_pack, decode_span, fused_write_ok,
                                             max_decode_span)
from attnkit.backends.triton.decode_heads import decode_heads_attention, heads_ok, heads_splits
from attnkit.backends.triton.decode_merge import merge_counters
from attnkit.backends.triton import decode_stream
from attnkit.backends.triton.configs import DECODE_STREAM_RULE
from attnkit.backends.triton.extend import extend_attention, extend_config, new_kv_ok
from attnkit.backends.triton.extend_new_kv import extend_attention_v2
from attnkit.backends.triton.configs import split_keys as default_split_keys
from attnkit.backends.triton.invariant import DecodeRows, check_invariant_options, fixed_splits
from attnkit.backends.triton.tma_path import (TMA_ONLY_KEYS, check_tma_override,
                                              merged_tma_config, run_tma_extend, tma_route)
from attnkit.backends.triton.tma_path import (chain_fuses_write, gluon_prefill_ready, gluon_rows_route,
                                              run_gluon_rows)
from attnkit.backends.triton.configs import GLUON_ROWS_VARIANTS, gluon_rows_config
from attnkit.backends.triton.rows_schedule import block_arrays
from attnkit.errors import fail
from attnkit.registry.kernels import KernelTable, step_point



@dataclass(slots=True)
class TritonStep:
    """Per-step state shared by every layer (tensors int32, on the compute device)."""
    meta: BatchMetadata
    query_start_loc: torch.Tensor     # [B+1]
    seq_lens: torch.Tensor            # [B]
    block_tables: torch.Tensor        # [B, P]
    num_sms: int
    max_kv: int | None = None         # static (captured) steps: the longest KV a refill may hold
    blocks: dict = field(default_factory=dict)     # (BLOCK_M, apart) -> (block_req [NB], block_m [NB])
    splits: dict = field(default_factory=dict)     # (H_kv, window, attn chunk, BLOCK_N) -> (splits, chunk)
    partials: dict = field(default_factory=dict)   # (H_q, BLOCK_DV, splits) -> 3 f32 buffers
    rows: dict = field(default_factory=dict)       # tma_path.row_layout of the padded K/V rows
    counters: torch.Tensor | None = None           # decode split_merge / split_heads: merge tickets, zeros
    # paged_fixed: the one-token rows over a cached prefix, run by the decode kernel (DecodeRows)
    decode_rows: "DecodeRows | None" = None
    variants: tuple[str, ...] = ()                 # the plan's variants for this step, in order
    ran: dict = field(default_factory=dict)        # layer id -> the variant its last call ran

    def query_blocks(self, block_m: int, *, apart: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Request index and first query row of every BLOCK_M-row query block, the blocks
        with the most keys first so the long programs do not trail at the end of the grid
        (``apart``: of the requests the decode kernel does not take, all but ``decode_rows``)."""
        key = (block_m, apart and self.decode_rows is not None)
        if key not in self.blocks:
            rest = self.decode_rows.others if key[1] else None
            self.blocks[key] = query_blocks(self.meta.query_lens_cpu, self.meta.seq_lens_cpu,
                                            block_m, device=self.seq_lens.device, requests=rest)
        return self.blocks[key]

    def decode_splits(self, num_kv_heads: int, window: int | None, attention_chunk: int | None,
                      block_n: int) -> tuple[int, int]:
        key = (num_kv_heads, window, attention_chunk, block_n)
        if key not in self.splits:
            # Keys a request reads: all of them, or from the window's edge / the chunk's start.
            if self.max_kv is None:
                spans = [decode_span(n, window, attention_chunk, block_n)
                         for n in self.meta.seq_lens_cpu]
            else:               # a static step: sized for any refill, not for today's lengths
                spans = [max_decode_span(self.max_kv, window, attention_chunk, block_n)]
            self.splits[key] = choose_splits(max(spans, default=1), self.meta.num_reqs,
                                             num_kv_heads, block_n=block_n, num_sms=self.num_sms)
        return self.splits[key]

    def split_buffers(self, num_heads: int, block_dv: int, splits: int):
        return split_buffers(self.partials, self.meta.num_reqs, num_heads, block_dv, splits,
                             device=self.seq_lens.device)


def split_buffers(memo: dict, num_reqs: int, num_heads: int, block_dv: int, splits: int, *,
                  device):
    """The decode kernel's float32 partials (out [B, H, S, BLOCK_DV], max and denominator
    [B, H, S]), allocated once per step and shape in ``memo`` and reused by every layer."""
    key = (num_heads, block_dv, splits)
    if key not in memo:
        f32 = dict(dtype=torch.float32, device=device)
        memo[key] = (torch.empty(num_reqs, num_heads, splits, block_dv, **f32),
                     torch.empty(num_reqs, num_heads, splits, **f32),
                     torch.empty(num_reqs, num_heads, splits, **f32))
    return memo[key]


def query_blocks(q_lens, kv_lens, block_m: int, *, device,
                 requests=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(block_req [NB], block_m [NB]) int32: request index and first query row of every
    BLOCK_M-row query block of ``requests`` (default all), most keys first.
    q_lens / kv_lens: per request new tokens and keys (host ints)."""
    return tuple(torch.from_numpy(x).to(device=device, dtype=torch.int32)
                 for x in block_arrays(q_lens, kv_lens, block_m, requests=requests))


def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


class TritonBackend(AttentionBackend):
    """Options (keyword-only): ``kernels``, the plan's kernel tables ({role: KernelTable},
    Plan.run.backend_options), or ``extend_variant`` / ``decode_variant`` to run one variant
    (tests, benchmarks: "v1" / "v2" / "tma" / "gluon" / "fixed" for extends, "v1" / "v2" /
    "fused" / "fixed" for decodes, or the declared names); ``extend_config`` / ``decode_config``
    dicts (BLOCK_M, BLOCK_N, num_warps, num_stages) over a variant's launch configuration,
    ``num_splits`` (decode KV splits of the split-counted variants; the chunk follows from it),
    ``split_keys`` (keys per split of split_fixed, default configs.split_keys); ``varlen_kernel``
    runs one varlen variant alone (varlen_path.py: "tile", "gluon", "persistent", "split" or the declared
    names; the Gluon forms where they run, else the tile); without it the plan's varlen table
    decides.

    ``batch_invariant=True`` is the variants that declare batch_invariant and deterministic
    (split_fixed, paged_fixed: backends/triton/invariant.py), spelled as one option; it refuses
    options that would run another (AK407)."""

    name = "triton"
    declaration = DECLARATION

    def __init__(self, *, kernels: Mapping[str, KernelTable] | None = None,
                 extend_config: dict | None = None, decode_config: dict | None = None,
                 num_splits: int | None = None, extend_variant: str | None = None,
                 decode_variant: str | None = None, split_keys: int | None = None,
                 batch_invariant: bool = False, varlen_kernel: str | None = None):
        check_option("triton", "batch_invariant", batch_invariant, (False, True))
        extend_variant = extend_kernels.EXTEND_VARIANT_NAMES.get(extend_variant, extend_variant)
        decode_variant = decode_kernels.DECODE_VARIANT_NAMES.get(decode_variant, decode_variant)
        check_option("triton", "extend_variant", extend_variant,
                     (None, *extend_kernels.EXTEND_VARIANTS, "gluon", *GLUON_ROWS_VARIANTS, "fixed",
                      *extend_kernels.EXTEND_VARIANT_NAMES))
        check_option("triton", "decode_variant", decode_variant,
                     (None, *decode_kernels.DECODE_VARIANTS, "fixed", "heads", "stream",
                      *decode_kernels.DECODE_VARIANT_NAMES))
        if batch_invariant:                 # the declared variants, by one option
            check_invariant_options(kernels, extend_variant, decode_variant, num_splits)
            extend_variant = decode_variant = "fixed"
        check_int_option(self.name, "split_keys", split_keys)
        if split_keys is not None and num_splits is not None:
            fail("AK407", "triton: num_splits and split_keys both fix the decode splits; give one",
                 field="split_keys", expected="None when num_splits is set", actual=split_keys)
        if decode_variant == "fixed" and num_splits is not None:
            fail("AK407", "triton: split_fixed splits every request in split_keys keys; num_splits "
                          "would size the splits by the batch's longest request",
                 field="num_splits", expected="None (use split_keys)", actual=num_splits)
        self.split_keys = default_split_keys(interpret=interpreting()) if split_keys is None else split_keys
        check_option("triton", "varlen_kernel", varlen_kernel,
                     (None, *varlen_path.OPTION_NAMES, *varlen_path.OPTION_NAMES.values()))
        self.extend_variant = extend_variant
        self.decode_variant = decode_variant
        self.kernels = check_kernel_tables(self.name, kernels, DECLARATION)
        for role, variant in (("prefill", extend_variant), ("extend", extend_variant),
                              ("decode", decode_variant)):
            if variant is not None:        # one variant, asked for by name: it alone runs
                names = decode_kernels.PLAN_NAMES if role == "decode" else extend_kernels.PLAN_NAMES
                self.kernels[role] = KernelTable.only(role, names[variant])
        if varlen_kernel is not None:      # one varlen variant, asked for by name
            self.kernels["varlen"] = KernelTable.only("varlen", varlen_path.OPTION_NAMES.get(varlen_kernel, varlen_kernel))
        self.extend_override = check_launch_config(self.name, "extend_config", extend_config)
        check_tma_override(self.extend_override)
        self.decode_override = check_launch_config(self.name, "decode_config", decode_config)
        check_int_option(self.name, "num_splits", num_splits)
        self.num_splits = num_splits
        self._varlen_memo = varlen_path.Memo()     # the varlen call's launch decisions, per signature

    def _varlen(self, q, k, v, layer: RuntimeLayer, batch):
        return varlen_path.varlen(q, k, v, layer, batch, self.kernels.get("varlen") or DEFAULT_TABLES["varlen"],
                                  memo=self._varlen_memo)

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        dev = cache.device
        i32 = lambda x: torch.as_tensor(x, device=dev).to(torch.int32).contiguous()  # noqa: E731
        plan = TritonStep(meta=meta, query_start_loc=i32(meta.query_start_loc),
                              seq_lens=i32(meta.seq_lens), block_tables=i32(meta.block_tables),
                              num_sms=sm_count(dev))
        plan.variants = self._variants(meta)
        if meta.mode is ForwardMode.DECODE and plan.variants[:1] in (("split_merge",), ("split_heads",)):
            plan.counters = merge_counters(meta.num_reqs, dev)   # zeroed outside any graph
        if meta.mode is not ForwardMode.DECODE and "paged_fixed" in plan.variants:
            plan.decode_rows = DecodeRows.of(meta, plan)
        return StepState(meta=meta, prepared=plan)

    def _variants(self, meta: BatchMetadata, *, max_kv: int | None = None) -> tuple[str, ...]:
        """The variants the plan lists for this step, in its order (step_point: the step's
        batch, new tokens and context)."""
        role = step_role(meta)
        table = self.kernels.get(role) or DEFAULT_TABLES[role]
        return table.candidates(*step_point(meta.query_lens_cpu, meta.seq_lens_cpu, max_kv=max_kv))

    def static_reaches(self, batch: int, max_seq_len: int) -> tuple[int, ...]:
        """Where the plan's decode table changes its first variant below ``max_seq_len``."""
        return (self.kernels.get("decode") or DEFAULT_TABLES["decode"]).reaches(batch, 1, max_seq_len)

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """The static decode plan: meta's own tensors (int32, read in place), split counts
        sized for ``max_seq_len`` keys. The decode path builds nothing from host lists."""
        plan = TritonStep(meta=meta, query_start_loc=meta.query_start_loc,
                              seq_lens=meta.seq_lens, block_tables=meta.block_tables,
                              num_sms=sm_count(cache.device), max_kv=max_seq_len)
        plan.variants = self._variants(meta, max_kv=max_seq_len)
        if plan.variants[:1] == ("split_heads",):      # its tickets, zeroed outside the graph
            plan.counters = merge_counters(meta.num_reqs, cache.device)
        return StepState(meta=meta, prepared=plan)

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, H_q, D]; k: [T, H_kv, D]; v: [T, H_kv, D_v] -> [T, H_q * D_v] in q's dtype."""
        spec, meta, plan = layer.spec, step.meta, step.prepared
        lid = spec.layer_id
        if meta.mode is ForwardMode.IDLE or q.shape[0] == 0:
            return q.new_empty(0, spec.num_heads * spec.value_dim)
        decode = meta.mode is ForwardMode.DECODE
        variant = self._runnable(plan, q, k, v, layer, cache, meta)
        plan.ran[lid] = variant
        stream_cfg = self._stream_config(spec) if decode and variant == "stream" else None
        chain_write = variant == "gluon_rows_chain" and chain_fuses_write(q, k, v, layer, cache, meta)
        fused_write = (variant in ("split_write", "split_merge", "split_heads") or chain_write
                       or bool(stream_cfg and stream_cfg.get("FUSED_WRITE")))
        if not fused_write:     # those variants (stream, the chain: where they can) write the new K/V themselves
            write_kv(cache, lid, meta.slot_mapping, k, v)
        out = torch.empty(q.shape[0], spec.num_heads, spec.value_dim, dtype=q.dtype, device=q.device)
        softcap = spec.logit_softcap
        qk_scale, _, v_scale = kernel_scales(layer, cache, softcap)
        sinks = layer.sinks.to(device=q.device, dtype=torch.float32).contiguous() if spec.sinks else None
        common = dict(qk_scale=qk_scale, v_scale=v_scale, softcap=softcap,
                      window=spec.sliding_window, attention_chunk=spec.attention_chunk, sinks=sinks)
        k_cache, v_cache = cache.k[lid], cache.v[lid]
        if decode and variant == "split_heads":
            self._decode_heads(q, k, v, layer, cache, plan, out, qk_scale)
        elif stream_cfg is not None:
            self._decode_stream(q, k, v, layer, cache, plan, out, qk_scale, stream_cfg,
                                new_kv=(k, v, meta.slot_mapping) if fused_write else None)
        elif decode:
            cfg = decode_config(spec.head_dim, q.dtype, interpret=interpreting(),
                                variant=variant) | self.decode_override
            cfg["PACK"] = decode_pack(cfg.get("PACK", 1), k_cache, v_cache, (k, v) if fused_write else None)
            fixed = variant == "split_fixed"         # every request's partition is its own
            splits, chunk = self._splits(plan, spec, cfg["BLOCK_N"], spec.num_kv_heads // cfg["PACK"],
                                         fixed=fixed)
            partials = (plan.split_buffers(spec.num_heads, padded_dim(spec.value_dim), splits)
                        if splits > 1 or fixed else None)
            decode_attention(q, k_cache, v_cache, out, seq_lens=plan.seq_lens,
                             block_tables=plan.block_tables, num_splits=splits, chunk=chunk,
                             partials=partials, config=cfg, fixed_chunk=fixed, **common,
                             new_kv=(k, v, meta.slot_mapping) if fused_write else None,
                             counters=plan.counters if variant == "split_merge" else None)
        elif variant in GLUON_ROWS_VARIANTS:
            cfg = gluon_rows_config(spec.head_dim, persistent=variant != "gluon_rows",
                                    chain=variant == "gluon_rows_chain")
            block_req, block_m = plan.query_blocks(cfg["BLOCK_M"])
            run_gluon_rows(gluon_rows_route(q, k, v, layer, cache, meta), q, k, v, out, cache, lid,
                           plan, block_req=block_req, block_m=block_m, qk_scale=qk_scale,
                           v_scale=v_scale, tiles=(cfg["BLOCK_N"], cfg["K_SLOTS"], cfg["V_SLOTS"]),
                           programs=plan.num_sms * cfg["PROGRAMS_PER_SM"] if "PROGRAMS_PER_SM" in cfg else None,
                           schedule=cfg.get("SCHEDULE"),
                           write=(k_cache, v_cache, meta.slot_mapping) if chain_write else None)
        elif variant in ("tma", "gluon"):
            cfg = merged_tma_config(spec.head_dim, self.extend_override, interpret=interpreting())
            cfg["GLUON"] = variant == "gluon" or bool(self.extend_override.get("GLUON"))
            block_req, block_m = plan.query_blocks(cfg["BLOCK_M"])
            common.pop("attention_chunk")        # None here: tma_route refuses chunked layers
            run_tma_extend(tma_route(q, k, v, layer, cache, meta), q, k, v, out, cache, lid, plan,
                           config=cfg, block_req=block_req, block_m=block_m, causal=spec.causal,
                           **common)
        else:
            kernel = "v2" if variant == "paged_new_kv" else "v1"
            # a step the tma kernel does not serve: its switches are not the paged kernels'
            # (Triton on a GPU raises KeyError on a keyword a kernel does not take)
            paged = {key: val for key, val in self.extend_override.items() if key not in TMA_ONLY_KEYS}
            cfg = extend_config(spec.head_dim, q.dtype, interpret=interpreting(),
                                variant=kernel) | paged
            apart = variant == "paged_fixed"          # its decode rows run the decode kernel
            block_req, block_m = plan.query_blocks(cfg["BLOCK_M"], apart=apart)
            common.update(block_req=block_req, block_m=block_m, query_start_loc=plan.query_start_loc,
                          seq_lens=plan.seq_lens, block_tables=plan.block_tables,
                          causal=spec.causal, config=cfg)
            if kernel == "v2":
                extend_attention_v2(q, k, v, k_cache, v_cache, out, **common)
            else:
                extend_attention(q, k_cache, v_cache, out, **common)
            if apart and plan.decode_rows is not None:    # as split_fixed runs them alone
                dcfg = decode_config(spec.head_dim, q.dtype, interpret=interpreting()) | self.decode_override
                scales = {key: common[key] for key in ("qk_scale", "v_scale", "softcap", "window",
                                                       "attention_chunk", "sinks")}
                plan.decode_rows.run(q, k_cache, v_cache, out, spec, meta.seq_lens_cpu, config=dcfg,
                                     split_keys=self.split_keys, **scales)
        return out.view(q.shape[0], spec.num_heads * spec.value_dim)

    def _decode_heads(self, q, k, v, layer, cache, plan: TritonStep, out, qk_scale: float) -> None:
        """Variant split_heads (decode_heads.py): splits by configs.DECODE_HEADS_RULE (or
        ``num_splits``), the step's partials and tickets, one launch."""
        spec, meta = layer.spec, plan.meta
        cfg = decode_config(spec.head_dim, q.dtype, interpret=interpreting(),
                            variant="split_heads") | self.decode_override
        longest = plan.max_kv or max(meta.seq_lens_cpu, default=1)
        if self.num_splits is None:
            splits, _ = heads_splits(longest, meta.num_reqs, num_sms=plan.num_sms, block_n=cfg["BLOCK_N"])
        else:
            splits = min(self.num_splits, -(-longest // cfg["BLOCK_N"]))
        plan.splits[("heads", cfg["BLOCK_N"])] = (splits, 0)
        if plan.counters is None:
            plan.counters = merge_counters(meta.num_reqs, q.device)
        decode_heads_attention(q, cache.k[spec.layer_id], cache.v[spec.layer_id], out,
                               seq_lens=plan.seq_lens, block_tables=plan.block_tables,
                               new_kv=(k, v, meta.slot_mapping), qk_scale=qk_scale,
                               num_splits=splits, counters=plan.counters, config=cfg,
                               partials=plan.split_buffers(spec.num_heads, spec.head_dim, splits))

    def _stream_config(self, spec) -> dict:
        return decode_config(spec.head_dim, torch.bfloat16, interpret=False,
                             variant="stream") | self.decode_override

    def _decode_stream(self, q, k, v, layer, cache, plan: TritonStep, out, qk_scale: float,
                       cfg: dict, *, new_kv) -> None:
        """Variant stream (decode_stream.py): splits by configs.DECODE_STREAM_RULE (or
        ``num_splits``) sized for the step's longest request (a static step: ``max_kv``)."""
        spec, meta = layer.spec, plan.meta
        tile = max(cfg["BLOCK_N"], cache.k[spec.layer_id].shape[1])
        key = ("stream", spec.num_kv_heads, tile)
        if key not in plan.splits:
            longest = plan.max_kv or max(meta.seq_lens_cpu, default=1)
            if self.num_splits is None:
                plan.splits[key] = decode_stream.stream_splits(
                    longest, meta.num_reqs, spec.num_kv_heads, num_sms=plan.num_sms,
                    block_n=tile, min_keys=DECODE_STREAM_RULE["min_keys"])
            else:
                per_split = -(-longest // self.num_splits)
                chunk = -(-per_split // tile) * tile
                plan.splits[key] = (-(-longest // chunk), chunk)
        splits, chunk = plan.splits[key]
        partials = plan.split_buffers(spec.num_heads, spec.head_dim, splits) if splits > 1 else None
        decode_stream.decode_stream_attention(
            q, cache.k[spec.layer_id], cache.v[spec.layer_id], out, seq_lens=plan.seq_lens,
            block_tables=plan.block_tables, qk_scale=qk_scale, num_splits=splits, chunk=chunk,
            partials=partials, config=cfg, new_kv=new_kv)

    def _runnable(self, plan: TritonStep, q, k, v, layer, cache, meta) -> str:
        """The first of the plan's variants for this step that can take it here (each variant's
        own conditions: dtypes of the cache, a route the tma kernel serves ...); the general
        kernel of the role (split / paged) when none of them can."""
        for variant in plan.variants:
            if RUNNABLE[variant](q, k, v, layer, cache, meta):
                return variant
        return "split" if meta.mode is ForwardMode.DECODE else "paged"

    def _splits(self, plan: TritonStep, spec, block_n: int, kv_programs: int, *,
                fixed: bool) -> tuple[int, int]:
        """(splits, chunk) of a decode whose grid has ``kv_programs`` programs per request
        and split (the KV heads over the config's PACK); ``fixed``: split_fixed's partition."""
        if fixed:                           # split_keys keys per split; the grid covers the longest
            window, attn_chunk = spec.sliding_window, spec.attention_chunk
            if plan.max_kv is not None:
                span = max_decode_span(plan.max_kv, window, attn_chunk, block_n)
            else:
                span = max((decode_span(n, window, attn_chunk, block_n)
                            for n in plan.meta.seq_lens_cpu), default=1)
            return fixed_splits(span, self.split_keys, block_n)
        if self.num_splits is None:
            return plan.decode_splits(kv_programs, spec.sliding_window, spec.attention_chunk, block_n)
        longest = plan.max_kv or max(plan.meta.seq_lens_cpu, default=1)
        per_split = -(-longest // self.num_splits)
        chunk = -(-per_split // block_n) * block_n
        return -(-longest // chunk), chunk


def step_role(meta: BatchMetadata) -> str:
    """The plan role of a step: decode, a fresh prefill (no cached prefix), or an extend."""
    if meta.mode is ForwardMode.DECODE:
        return "decode"
    return "prefill" if meta.mode is ForwardMode.EXTEND and not any(meta.prefix_lens_cpu) else "extend"


def _gluon_ok(q, k, v, layer, cache, meta) -> bool:
    spec = layer.spec
    return (tma_route(q, k, v, layer, cache, meta) == "direct" and spec.causal
            and gluon_prefill_ready(q, k, v, q, causal=True, window=spec.sliding_window,
                                    softcap=spec.logit_softcap, sinks=layer.sinks if spec.sinks else None,
                                    qk_scale=spec.softmax_scale))


# variant -> whether it can take this call (beyond what the plan checked: the step's own tensors)
RUNNABLE = {
    "split": lambda q, k, v, layer, cache, meta: True,
    "split_write": lambda q, k, v, layer, cache, meta: fused_write_ok(k, v, cache, layer.spec.layer_id),
    "split_merge": lambda q, k, v, layer, cache, meta: fused_write_ok(k, v, cache, layer.spec.layer_id),
    "paged": lambda q, k, v, layer, cache, meta: True,
    "paged_new_kv": lambda q, k, v, layer, cache, meta: new_kv_ok(k, v, cache, layer.spec.layer_id),
    "tma": lambda q, k, v, layer, cache, meta: tma_route(q, k, v, layer, cache, meta) is not None,
    "gluon": _gluon_ok,
    "gluon_rows": lambda q, k, v, layer, cache, meta: gluon_rows_route(q, k, v, layer, cache, meta) is not None,
    "gluon_rows_persistent": lambda q, k, v, layer, cache, meta: gluon_rows_route(q, k, v, layer, cache, meta) is not None,
    "gluon_rows_chain": lambda q, k, v, layer, cache, meta: (
        gluon_rows_config(layer.spec.head_dim, persistent=True, chain=True) is not None
        and gluon_rows_route(q, k, v, layer, cache, meta) is not None),
    "split_fixed": lambda q, k, v, layer, cache, meta: True,
    "split_heads": lambda q, k, v, layer, cache, meta: heads_ok(q, k, v, layer, cache),
    "paged_fixed": lambda q, k, v, layer, cache, meta: True,
    "stream": lambda q, k, v, layer, cache, meta: decode_stream.stream_ok(q, k, v, layer, cache),
}
DEFAULT_TABLES = {role: KernelTable(role, fallback=tuple(k.name for k in DECLARATION.variants_for(role)))
                  for role in ("prefill", "extend", "decode", "varlen")}
