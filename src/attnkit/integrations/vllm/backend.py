"""vLLM's backend / metadata-builder / impl classes around attnkit's planned backend.

Start-up: the first impl (one per attention layer, made while vLLM builds the model) and the
first metadata builder ask ``planned()`` for the plan of the model vLLM loaded, made once per
process from vLLM's config (hf config, dtype, KV-cache dtype, block size, tensor-parallel size,
device) and logged in one line; a model attnkit refuses fails there, with attnkit's code. Each
impl then checks that vLLM built its layer as the plan describes (AK496).

Per step: ``AttnkitMetadataBuilder.build`` turns vLLM's ``CommonAttentionMetadata`` into
attnkit's ``BatchMetadata`` (once per KV-cache group and step); the first layer prepares the
backend's step on it and the others reuse it. Per layer: ``AttnkitImpl.forward`` views vLLM's
own cache tensor of that layer as attnkit's K and V pages (no copy: vLLM allocates it in the
LBNHC layout this backend asks for, so per page the tokens' K and V sit side by side) and runs
``backend.forward``, which writes the step's keys into those pages and attends.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from vllm.config import VllmConfig, get_current_vllm_config
from vllm.logger import init_logger
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, CommonAttentionMetadata)
from vllm.v1.kv_cache_interface import KVCacheLayout

from attnkit.backends.base import StepState
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import AttnkitError, fail
from attnkit.integrations.engine_plan import EnginePlan, plan_engine, startup_line
from attnkit.kvcache.paged import COMPUTE_TORCH_DTYPES, PagedKVCache

STATS = {"forwards": 0, "steps": 0}     # this process's counts (tests read them)
_PLANS: dict[int, tuple[Any, EnginePlan]] = {}
_LOCK = threading.Lock()
logger = init_logger("vllm.attnkit")   # in vLLM's log stream, with its process prefix


def planned(config: VllmConfig | None = None) -> EnginePlan:
    """attnkit's plan for the model of ``config`` (default: vLLM's current config), made and
    logged once per config and process."""
    config = config or get_current_vllm_config()
    with _LOCK:
        hit = _PLANS.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1]
        model, cache = config.model_config, config.cache_config
        tp = config.parallel_config.tensor_parallel_size
        settings = {"block_size": cache.block_size, "kv_cache_dtype": cache.cache_dtype,
                    "dtype": str(model.dtype).removeprefix("torch."),
                    "tensor_parallel_size": tp,
                    "device": str(config.device_config.device)}
        ep = plan_engine(model.hf_text_config.to_dict(), engine="vLLM", name=str(model.model),
                         device=config.device_config.device, dtype=model.dtype,
                         kv_cache_dtype=cache.cache_dtype, page_size=cache.block_size,
                         tp_size=tp)
        logger.info(startup_line(ep, engine_settings=settings))
        _PLANS[id(config)] = (config, ep)
        return ep


class AttnkitBackend(AttentionBackend):
    """What vLLM asks of a backend class; the plan answers the rest at start-up."""

    forward_includes_kv_cache_update: ClassVar[bool] = True    # attnkit's forward writes K/V
    supported_dtypes: ClassVar[list[torch.dtype]] = list(COMPUTE_TORCH_DTYPES)
    # fp8 reaches the impl so that it is refused there with attnkit's code (AK496)
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "float16", "bfloat16",
                                                      "fp8", "fp8_e4m3", "fp8_e5m2"]
    registered_as: ClassVar[str] = "CUSTOM"

    @classmethod
    def get_name(cls) -> str:
        return cls.registered_as

    @staticmethod
    def get_impl_cls() -> type["AttnkitImpl"]:
        return AttnkitImpl

    @staticmethod
    def get_builder_cls() -> type["AttnkitMetadataBuilder"]:
        return AttnkitMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return (KVCacheLayout.LBNHC,)     # [pages, tokens, heads, K|V]: attnkit's page rows

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True


class AttnkitCpuBackend(AttnkitBackend):
    registered_as = "CPU_ATTN"          # vLLM's CPU platform serves every MHA layer with it


class AttnkitCustomBackend(AttnkitBackend):
    registered_as = "CUSTOM"


@dataclass(slots=True)
class AttnkitMetadata:
    """One step of one KV-cache group: attnkit's batch metadata, and the backend's step on it,
    prepared by the first layer that runs (``step_for``)."""
    num_actual_tokens: int
    meta: BatchMetadata | None
    step: StepState | None = None

    def step_for(self, ep: EnginePlan, cache: PagedKVCache) -> StepState:
        if self.step is None:
            self.step = ep.backend.prepare(self.meta, cache)
            STATS["steps"] += 1
        return self.step


class AttnkitMetadataBuilder(AttentionMetadataBuilder[AttnkitMetadata]):
    def __init__(self, kv_cache_spec, layer_names: list[str], vllm_config: VllmConfig,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.plan = planned(vllm_config)
        self.block_size = kv_cache_spec.block_size
        if self.block_size != self.plan.page_size:
            fail("AK496", f"vLLM pages this KV-cache group in blocks of {self.block_size} "
                          f"tokens; attnkit planned page_size {self.plan.page_size}",
                 field="block_size", expected=self.plan.page_size, actual=self.block_size)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AttnkitMetadata:
        c = common_attn_metadata
        if not (c.causal is True):
            fail("AK496", "vLLM asks for a non-causal or per-request causal step; attnkit's "
                          "vLLM backend serves causal decoder attention", field="causal",
                 expected=True, actual=repr(c.causal)[:40])
        starts = c.query_start_loc_cpu[: c.num_reqs + 1].tolist()
        seq_lens = c.seq_lens[: c.num_reqs].tolist()
        tables = c.block_table_tensor[: c.num_reqs]
        reqs = []
        for i, seq in enumerate(seq_lens):
            new = starts[i + 1] - starts[i]
            need = -(-seq // self.block_size)
            reqs.append(Request(prefix_len=seq - new, num_new=new, block_table=tables[i, :need].tolist()))
        meta = build_batch(reqs, page_size=self.block_size, device=self.device) if reqs else None
        return AttnkitMetadata(num_actual_tokens=c.num_actual_tokens, meta=meta)


class AttnkitImpl(AttentionImpl[AttnkitMetadata]):
    """One attention layer: checked against the plan when vLLM makes it (start-up)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **extra: Any) -> None:
        self.plan = planned()
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window, self.logits_soft_cap, self.sinks = sliding_window, logits_soft_cap, sinks
        self.kv_cache_dtype, self.attn_type = kv_cache_dtype, attn_type
        unsupported = {"alibi_slopes": alibi_slopes, "kv_sharing_target_layer_name":
                       kv_sharing_target_layer_name, **extra}
        unsupported = {k: v for k, v in unsupported.items() if v is not None}
        if attn_type != AttentionType.DECODER or unsupported:
            what = ", ".join(f"{k}" for k in unsupported) or f"attention type {attn_type}"
            fail("AK496", f"vLLM builds an attention layer with {what}; attnkit's vLLM backend "
                          "serves decoder self-attention (MHA/GQA/MQA, windows, softcap, sinks)",
                 field="layer", expected="decoder self-attention", actual=what)
        if kv_cache_dtype.startswith("fp8"):
            # vLLM stores fp8 pages as bytes with its own quantisation; attnkit reading them gave
            # other logprobs than vLLM's CPU kernel (0.27 apart on a tiny model): not served yet
            fail("AK496", f"vLLM runs an fp8 KV cache ({kv_cache_dtype}); attnkit's vLLM backend "
                          "does not read vLLM's fp8 pages yet: use kv_cache_dtype='auto'",
                 field="kv_cache_dtype", expected="auto", actual=kv_cache_dtype)
        self._check_one_of_plan()
        self._layer = None
        self._cache: tuple[int, PagedKVCache] | None = None

    def _args(self) -> dict[str, Any]:
        return dict(num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_size=self.head_size,
                    scale=self.scale, sliding_window=self.sliding_window, softcap=self.logits_soft_cap,
                    sinks=self.sinks)

    def _check_one_of_plan(self) -> None:
        """At start-up: some planned layer is this one (which, vLLM tells at the first forward)."""
        errors = []
        for lid in sorted(self.plan.layers):
            try:
                self.plan.check(lid, **self._args())
                return
            except AttnkitError as exc:     # keep the first, for the message
                errors.append(exc)
        raise errors[0]

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: AttnkitMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        """query: [T, H, D]; key / value: [T, H_kv, D]; kv_cache: this layer's pages, logical
        [num_blocks, H_kv, block_size, D + D_v]; output: [T, H, D_v], written in place."""
        if output_scale is not None or output_block_scale is not None:
            fail("AK496", "vLLM asks attnkit's backend to quantise its output (a fused output "
                          "quantisation pass); attnkit returns the output in the compute dtype",
                 field="output_scale", expected=None, actual="a scale")
        if attn_metadata is None or attn_metadata.meta is None:
            return output                  # vLLM's warm-up and profiling runs
        if self._layer is None:
            from vllm.model_executor.models.utils import extract_layer_index

            self._layer = self.plan.layer(extract_layer_index(layer.layer_name), **self._args())
        cache = self._paged(kv_cache)
        if self.sinks is not None:          # loaded after start-up; attnkit reads float32 sinks
            self._layer.sinks = self.sinks if self.sinks.dtype == torch.float32 else self.sinks.float()
        n = attn_metadata.num_actual_tokens
        step = attn_metadata.step_for(self.plan, cache)
        out = self.plan.backend.forward(query[:n], key[:n], value[:n], self._layer, cache, step)
        output[:n].copy_(out.view(n, self.num_heads, -1))
        STATS["forwards"] += 1
        return output

    def _paged(self, kv_cache: torch.Tensor) -> PagedKVCache:
        """attnkit's view of vLLM's cache tensor for this layer (made again if vLLM moves it)."""
        key = kv_cache.data_ptr()
        if self._cache is None or self._cache[0] != key:
            d, lid = self.head_size, self._layer.layer_id
            if kv_cache.dtype != self.plan.kv_dtype:
                fail("AK496", f"vLLM's KV cache of layer {lid} holds {kv_cache.dtype}; attnkit "
                              f"planned {self.plan.kv_dtype}", field="kv_cache_dtype",
                     expected=str(self.plan.kv_dtype), actual=str(kv_cache.dtype))
            pages = kv_cache.transpose(1, 2)          # [num_blocks, block_size, H_kv, D + D_v]
            self._cache = (key, PagedKVCache.over([self._layer.spec], k={lid: pages[..., :d]},
                                                  v={lid: pages[..., d:]}))
        return self._cache[1]


class AttnkitMlaRefusal(AttnkitBackend):
    """Registered over vLLM's MLA backends: MLA through this plugin is not built. Its impl plans
    the model (so what attnkit's planner refuses is refused with the planner's code) and then
    refuses with AK496 at start-up."""

    @staticmethod
    def get_impl_cls():
        return _MlaRefused

    @classmethod
    def is_mla(cls) -> bool:
        return True


class _MlaRefused:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        planned()
        fail("AK496", "the model has MLA layers; attnkit's vLLM backend serves MHA/GQA/MQA "
                      "layers only (its MLA route, on vLLM's latent cache, is not built)",
             field="kind", expected="mha", actual="mla")
