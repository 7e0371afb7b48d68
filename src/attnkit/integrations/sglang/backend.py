"""SGLang's ``AttentionBackend`` around attnkit's planned backend, on SGLang's own KV pool.

Start-up (``plan_runner``, from the registry's factory call): SGLang's own checks become
attnkit's coded reasons (MLA: AK496; dual chunk attention: AK496; an fp8 KV pool: AK496), then
the model SGLang loaded is planned with SGLang's dtype, page size and tensor-parallel size
(the planner's code for what it refuses) and one line is logged.

Per step (``init_forward_metadata``): SGLang's batch (req_to_token rows, sequence and extend
lengths) becomes attnkit's ``BatchMetadata`` with block tables in SGLang's pages; the first layer
prepares attnkit's step on it. Per layer: SGLang's K and V buffers of that layer
(``[slots, H_kv, D]``, slot = page * page_size + offset) are viewed as attnkit's pages, in place,
and ``backend.forward`` writes the new K/V there and attends.
"""
from __future__ import annotations

import logging

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

from attnkit.backends.batch import Request, build_batch
from attnkit.errors import fail
from attnkit.integrations.engine_plan import EnginePlan, plan_engine, startup_line
from attnkit.kvcache.paged import PagedKVCache

STATS = {"forwards": 0}
logger = logging.getLogger("sglang.attnkit")   # in SGLang's log stream


def plan_runner(runner) -> EnginePlan:
    """attnkit's plan for the model of SGLang's ``runner`` (refusals coded, at start-up)."""
    mc = runner.model_config
    hf = mc.hf_config
    name = str(getattr(mc, "model_path", "") or getattr(hf, "name_or_path", "") or "model")
    if getattr(runner, "use_mla_backend", False):
        fail("AK496", f"SGLang serves {name} with MLA (its latent KV pool); attnkit's SGLang "
                      "backend serves MHA/GQA/MQA layers only (its MLA route is not built)",
             field="attention_arch", expected="MHA", actual="MLA")
    if getattr(hf, "dual_chunk_attention_config", None):
        fail("AK496", f"{name} turns on dual chunk attention, which SGLang runs only with its "
                      "dual_chunk_flash_attn backend; attnkit's SGLang backend runs plain RoPE "
                      "attention", field="dual_chunk_attention_config", expected=None,
             actual="set")
    kv_dtype = runner.kv_cache_dtype
    if kv_dtype != runner.dtype:
        fail("AK496", f"SGLang's KV pool stores {kv_dtype} for a {runner.dtype} model; attnkit's "
                      "SGLang backend runs a KV cache in the compute dtype (no fp8 pool yet)",
             field="kv_cache_dtype", expected=str(runner.dtype), actual=str(kv_dtype))
    tp = _tp_size(runner)
    page = int(getattr(runner, "page_size", 1) or 1)
    ep = plan_engine(hf.to_dict(), engine="SGLang", name=name, device=torch.device(runner.device),
                     dtype=runner.dtype, kv_cache_dtype="auto", page_size=page, tp_size=tp)
    logger.info(startup_line(ep, engine_settings={"page_size": page, "dtype": str(runner.dtype),
                                                  "tp_size": tp, "device": str(runner.device)}))
    return ep


def _tp_size(runner) -> int:
    size = getattr(runner, "tp_size", None)
    if size is None:
        from sglang.srt.runtime_context import get_parallel

        size = get_parallel().tp_size
    return int(size)


class AttnkitSglangBackend(AttentionBackend):
    def __init__(self, runner, plan: EnginePlan):
        super().__init__()
        self.plan = plan
        self.device = runner.device
        self.req_to_token_pool = runner.req_to_token_pool
        self.token_to_kv_pool = runner.token_to_kv_pool
        self.page_size = plan.page_size
        self.meta = None
        self.step = None
        self._caches: dict[int, tuple[int, PagedKVCache]] = {}

    def init_forward_metadata(self, forward_batch) -> None:
        """Once per step: attnkit's batch metadata from SGLang's batch."""
        fb = forward_batch
        self.step = None
        if fb.forward_mode.is_idle():
            self.meta = None
            return
        seq = fb.seq_lens.tolist()
        if fb.forward_mode.is_decode():
            new = [1] * len(seq)
        elif fb.forward_mode.is_extend():
            new = list(fb.extend_seq_lens_cpu)
        else:
            fail("AK496", f"SGLang runs a {fb.forward_mode.name} step; attnkit's SGLang backend "
                          "runs extend and decode steps", field="forward_mode",
                 expected=["EXTEND", "DECODE"], actual=fb.forward_mode.name)
        rows = self.req_to_token_pool.req_to_token[fb.req_pool_indices.long()]
        p = self.page_size
        reqs = [Request(prefix_len=s - n, num_new=n,
                        block_table=(rows[i, :s:p] // p).tolist())
                for i, (s, n) in enumerate(zip(seq, new))]
        self.meta = build_batch(reqs, page_size=p, device=self.device)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._forward(q, k, v, layer, kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._forward(q, k, v, layer, kwargs)

    def _forward(self, q, k, v, layer, kwargs) -> torch.Tensor:
        """q: [T, H * D] or [T, H, D]; k, v: [T, H_kv, D] -> [T, H * D_v]. The K/V are written
        into SGLang's pool by attnkit's forward (always: the slots are the step's own)."""
        unknown = sorted(k_ for k_, v_ in kwargs.items() if v_ is not None)
        if k is None or v is None or unknown or layer.is_cross_attention:
            what = ", ".join(unknown) or ("cross attention" if layer.is_cross_attention else
                                          "no new K/V")
            fail("AK496", f"SGLang calls attnkit's backend with {what}; it serves decoder "
                          "self-attention with the step's own K/V", field="layer",
                 expected="decoder self-attention", actual=what)
        bound = self.plan.layer(
            layer.layer_id, num_heads=layer.tp_q_head_num, num_kv_heads=layer.tp_k_head_num,
            head_size=layer.qk_head_dim, scale=layer.scaling, softcap=layer.logit_cap or None,
            # SGLang's window excludes the query itself (HF's sliding_window - 1)
            sliding_window=None if layer.sliding_window_size in (None, -1) else
            layer.sliding_window_size + 1)
        cache = self._paged(bound)
        if self.step is None:
            self.step = self.plan.backend.prepare(self.meta, cache)
        t = q.shape[0]
        out = self.plan.backend.forward(q.view(t, layer.tp_q_head_num, -1),
                                        k.view(t, layer.tp_k_head_num, -1),
                                        v.view(t, layer.tp_v_head_num, -1), bound, cache, self.step)
        STATS["forwards"] += 1
        return out

    def _paged(self, bound) -> PagedKVCache:
        """attnkit's view of SGLang's K/V buffers of this layer: [pages, page_size, H_kv, D]."""
        lid = bound.layer_id
        k_buf = self.token_to_kv_pool.get_key_buffer(lid)
        v_buf = self.token_to_kv_pool.get_value_buffer(lid)
        hit = self._caches.get(lid)
        if hit is None or hit[0] != k_buf.data_ptr():
            pages = k_buf.shape[0] // self.page_size
            view = lambda b: b[: pages * self.page_size].view(pages, self.page_size, *b.shape[1:])  # noqa: E731
            hit = self._caches[lid] = (k_buf.data_ptr(), PagedKVCache.over(
                [bound.spec], k={lid: view(k_buf)}, v={lid: view(v_buf)}))
        return hit[1]
