"""dual_chunk: dual chunk attention (DCA, Qwen2.5-1M) over the paged KV cache.

Interface (the model's side is attnkit.runner.layers.rotary.DualChunkRotary):
    q3, k = rotary(q, k, meta.positions, length_scale=step_length_scales(meta, cfg))
    out = backend.forward(q3, k, v, layer, cache, step)
- q3: [T, 3, H_q, D] — each new token's query rotated three ways, stacked on dim 1 in the
  order intra (position p % cl), successor (min(p % cl + cl, cs)), inter (min(2cl - 1, cs)).
  Stacking keeps one tensor per argument, like every backend, and the token axis first.
- k: [T, H_kv, D] rotated at chunk-local positions k % cl; v: [T, H_kv, D_v]. Both are
  written to the cache as given: the cache holds chunk-local keys.
- returns [T, H_q * D_v] in q's dtype.
The backend knows chunks and the merge, not positions: query j of request i sits at
p = prefix_len + j, key k at its index in the request's KV (see parts.py for the split).
Modes EXTEND (with or without a cached prefix), DECODE and MIXED; page sizes that divide
cl = chunk_size - local_size (AK470 otherwise).

Length scale: the rotary multiplies keys and queries by s of their own step (s = 1 while
L <= original_max_position_embeddings). This backend never rescales: a key keeps the s it was
cached with, so logits of a later query q against it carry s_q * s_k. Hence a prefill in
pieces equals one in one go if every piece uses the whole prompt length for L (the literal
rule; step_length_scales(..., lengths=prompt_lens)), and in any case while L <= omax.
"""
from __future__ import annotations

import importlib.util
import os

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState, check_option
from attnkit.backends.dual_chunk.config import require_page_size, require_valid_config
from attnkit.backends.dual_chunk.declaration import DECLARATION
from attnkit.backends.dual_chunk.parts import dual_chunk_attend
from attnkit.backends.metadata import ForwardMode
from attnkit.backends.paged_torch import read_kv, refuse_unserved, write_step_kv
from attnkit.errors import fail
from attnkit.kvcache.paged import dtype_name

F32 = torch.float32
_CAPS = DECLARATION.capabilities
_MODES = (ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.MIXED, ForwardMode.IDLE)
IMPLS = ("auto", "torch", "triton")


class DualChunkBackend(AttentionBackend):
    """Two implementations of the same parts and merge:
    - "torch": float32 torch ops on any device, a loop over requests, each gathering its
      pages through its block-table row, then the three parts per query chunk (parts.py);
    - "triton": attnkit's Triton extend and decode kernels run each part in place over the
      paged cache (triton_parts.py); CUDA only (the interpreter in CPU tests).
    ``impl="auto"`` (default) runs "triton" on CUDA when Triton is installed, the GPU is one
    the triton backend declares (NVIDIA sm80+) and the layer's head dims fit (<= 256), else
    "torch"."""

    name = "dual_chunk"

    def __init__(self, *, impl: str = "auto"):
        check_option("dual_chunk", "impl", impl, IMPLS)
        self.impl = impl

    def _prepare(self, meta, cache) -> StepState:
        if meta.mode not in _MODES:
            fail("AK420", f"the dual_chunk backend serves EXTEND, DECODE and MIXED steps, not "
                          f"{meta.mode.name}",
                 field="meta.mode", expected=[m.name for m in _MODES], actual=meta.mode.name)
        if not self._use_triton(cache.device):
            return StepState(meta=meta)
        from attnkit.backends.dual_chunk.triton_parts import DcaTritonStep
        return StepState(meta=meta, prepared=DcaTritonStep.build(meta, cache.device))

    def capture_plan(self, meta, cache, *, max_seq_len: int) -> StepState:
        """Static decode steps run the Triton path only (the torch path loops over requests
        on the host): AK457 where that path does not run."""
        if not self._use_triton(cache.device):
            fail("AK457", "the dual_chunk backend captures its Triton path only, which does not "
                          f"run here (impl={self.impl!r}, device {cache.device}); the torch path "
                          "loops over requests on the host", field="impl",
                 expected="impl 'triton' or 'auto' on a CUDA GPU the triton backend declares",
                 actual=self.impl)
        from attnkit.backends.dual_chunk.triton_parts import DcaTritonStep
        return StepState(meta=meta, prepared=DcaTritonStep.static(meta, cache.device, max_seq_len))

    def refill_static(self, step: StepState) -> None:
        step.prepared.refill()

    def _use_triton(self, device: torch.device) -> bool:
        if self.impl == "torch":
            return False
        installed = importlib.util.find_spec("triton") is not None
        if self.impl == "auto":
            return device.type == "cuda" and installed and _triton_declared_gpu(device) is None
        if not installed:
            fail("AK420", "dual_chunk impl='triton' needs the triton package",
                 field="impl", expected="triton installed", actual="not installed")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1":
            fail("AK452", f"dual_chunk impl='triton' runs on CUDA devices; the cache is on "
                          f"{device}", field="cache.device", expected="cuda", actual=str(device))
        if device.type == "cuda":
            gpu, low = _triton_declared_gpu(device) or (None, None)
            if gpu is not None:
                fail("AK211", f"dual_chunk impl='triton' runs the triton backend's kernels, "
                              f"declared for NVIDIA GPUs sm{low[0]}{low[1]}+; this GPU is {gpu}. "
                              "Use impl='torch' (or 'auto', which picks it here)",
                     field="impl", expected=f"NVIDIA sm{low[0]}{low[1]}+", actual=gpu)
        return True

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, 3, H_q, D]; k: [T, H_kv, D]; v: [T, H_kv, D_v] -> [T, H_q * D_v]."""
        meta, spec = step.meta, layer.spec
        _check_cache_dtype(cache)
        cl = _check_layer(layer, meta.page_size)
        _check_queries(q, layer)          # shapes, dtypes, devices: validate_forward (base.py)
        if step.prepared is not None and meta.num_tokens:
            from attnkit.backends.dual_chunk.triton_parts import serves, triton_dual_chunk
            if serves(q, layer):
                out = triton_dual_chunk(q, k, v, layer, cache, step.prepared, cl)
                return out.reshape(meta.num_tokens, spec.num_heads * spec.value_dim)
            if self.impl == "triton" or step.prepared.max_kv is not None:
                # an explicit choice is refused, not quietly changed; a static step cannot
                # fall back to the torch path (host loops)
                fail("AK453", f"dual_chunk impl='triton': layer {spec.layer_id} has head_dim "
                              f"{spec.head_dim} / v_head_dim {spec.value_dim}; the triton kernels "
                              f"hold head rows up to 256 wide. Use impl='torch' (or 'auto')",
                     field="layer.spec.head_dim", expected="<= 256",
                     actual=[spec.head_dim, spec.value_dim])
        write_step_kv(k, v, layer, cache, meta)
        out = q.new_zeros(meta.num_tokens, spec.num_heads, spec.value_dim)
        start = 0
        for i, n in enumerate(meta.query_lens_cpu):
            s = meta.seq_lens_cpu[i]
            k_i, v_i = read_kv(cache, layer, meta.block_tables[i:i + 1], s, F32)    # [1, S, ...]
            out[start:start + n] = dual_chunk_attend(
                q[start:start + n].to(F32), k_i[0], v_i[0], q_start=meta.prefix_lens_cpu[i],
                chunk_len=cl, scale=spec.softmax_scale)
            start += n
        return out.reshape(meta.num_tokens, spec.num_heads * spec.value_dim)


def _triton_declared_gpu(device: torch.device) -> tuple[str, tuple[int, int]] | None:
    """None if the triton backend's declaration covers this CUDA device (NVIDIA, at least its
    minimum compute capability: bf16 tiles need sm80); else (what the GPU is, that minimum)."""
    from attnkit.backends.triton.declaration import DECLARATION as TRITON

    low = TRITON.capabilities.compute_capability[0]
    if torch.version.hip is not None:
        return f"ROCm (HIP {torch.version.hip})", low
    cc = tuple(torch.cuda.get_device_capability(device))
    return None if cc >= low else (f"sm{cc[0]}{cc[1]}", low)


def _check_layer(layer: RuntimeLayer, page_size: int) -> int:
    """The layer's chunk length cl, after refusing what this backend cannot serve."""
    config = layer.spec.dual_chunk
    if config is None:
        fail("AK471", f"layer {layer.layer_id} has no dual_chunk config; the dual_chunk backend "
                      "computes only dual chunk attention",
             field="layer.dual_chunk", expected="DualChunkConfig", actual=None)
    refuse_unserved("dual_chunk", layer, kinds=_CAPS.kinds, features=_CAPS.features)
    cl = require_valid_config(config, where=f"layer {layer.layer_id}: ")
    require_page_size(cl, page_size)
    return cl


def _check_queries(q, layer: RuntimeLayer) -> None:
    """The one input check specific to DCA: the three query variants are there."""
    if q is None or q.dim() != 4 or q.shape[1] != 3:
        fail("AK472", f"dual chunk attention needs q as [T, 3, H_q, D] (intra, successor, inter "
                      f"variants) for layer {layer.layer_id}, got {None if q is None else list(q.shape)}",
             field="q", expected=["T", 3, layer.spec.num_heads, layer.spec.head_dim],
             actual=None if q is None else list(q.shape))


def _check_cache_dtype(cache) -> None:
    """Only the declared KV-cache dtypes (fp8 pages with per-layer scales included)."""
    kv_dtype = dtype_name(cache.dtype) or str(cache.dtype)
    if kv_dtype not in _CAPS.kv_cache_dtypes:
        fail("AK420", f"the dual_chunk backend does not serve a {kv_dtype} KV cache",
             field="cache.dtype", expected=list(_CAPS.kv_cache_dtypes), actual=kv_dtype)

