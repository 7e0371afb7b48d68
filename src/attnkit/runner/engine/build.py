"""``Engine.from_pretrained``: checkpoint -> plan -> KV cache -> model (-> decode graphs)."""
from __future__ import annotations

import warnings
from typing import Any, Mapping, TextIO

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import AttnkitError, fail
from attnkit.kvcache.paged import TORCH_KV_DTYPES, PagedKVCache
from attnkit.runner.engine.checks import COMPUTE_DTYPES, check_count, coded_args, device_of, dtype_name
from attnkit.runner.engine.ledger import PageLedger
from attnkit.runner.engine.setup import backend_of, check_cache_room, model_layers, plan_for
from attnkit.runner.models.base import DecoderModel
from attnkit.runner.models.config import architecture_of
from attnkit.runner.models.weights import Weights, read_checkpoint


@coded_args("AK483")
def from_pretrained(cls, source: Any, *, backend: str | AttentionBackend | None = "auto",
                    page_size: int | None = None, dtype: torch.dtype | str = torch.float32,
                    device: torch.device | str = "cpu", max_tokens: int = 4096,
                    kv_cache_dtype: torch.dtype | str | None = None,
                    dual_chunk: bool | None = None,
                    prefill_backend: str | None = None, decode_backend: str | None = None,
                    backend_options: Mapping[str, Any] | None = None,
                    cuda_graph: bool | None = None, graph_capture: bool = True,
                    max_num_seqs: int = 256, progress: TextIO | None = None):
    """source: a local model directory (config.json + *.safetensors) or an in-memory
    transformers model.
    backend: a registered name or alias, checked by attnkit's planner against the model,
    device, dtypes and page size (every reason, the planner's codes); "auto" or None lets
    the planner choose (a hybrid if prefill and decode differ); an AttentionBackend object
    is used as is, unchecked.
    prefill_backend / decode_backend: a name for one phase only (the planner checks that
    both phases share one cache layout and page size; a hybrid runs them).
    page_size: None lets the planner choose one every chosen backend accepts.
    max_tokens: KV-cache room, in tokens, over all live sequences.
    dual_chunk: None follows the config's dual_chunk_attention_config; False runs plain
    RoPE attention as transformers does (exact while a sequence fits one chunk_size).
    cuda_graph: decode steps of up to ``max_num_seqs`` sequences as CUDA graphs, one per
    batch-size bucket (graphs.py), captured now (``progress``: a stream for a line about
    it). None follows the plan (--cuda-graph auto: on for CUDA plans whose backends
    declare cuda_graph; off with a backend object); True asks the planner for backends that
    capture and is AK489 where graphs cannot run; False decodes eagerly.
    graph_capture: False runs the graph runner's static-buffer path eagerly, without
    capturing (any device; for tests of its bookkeeping)."""
    check_count("max_tokens", max_tokens, minimum=1)
    check_count("page_size", page_size, minimum=1, allow_none=True)
    check_count("max_num_seqs", max_num_seqs, minimum=1)
    for name, value in (("cuda_graph", cuda_graph), ("graph_capture", graph_capture)):
        if value not in ((None, True, False) if name == "cuda_graph" else (True, False)):
            fail("AK483", f"{name} must be True, False{' or None' if name == 'cuda_graph' else ''}, "
                          f"got {value!r}", field=name, expected="bool", actual=repr(value))
    dev = device_of(device)
    if cuda_graph and graph_capture and dev.type != "cuda":
        fail("AK489", f"cuda_graph=True: CUDA graphs capture CUDA kernels, and the engine runs on "
                      f"{dev}; use cuda_graph=None (auto) or False", field="cuda_graph",
             expected=False, actual=True)
    cfg, tensors = read_checkpoint(source)
    arch = architecture_of(cfg)
    compute = dtype_name(dtype, field="dtype", table=COMPUTE_DTYPES)
    kv = compute if kv_cache_dtype is None else dtype_name(
        kv_cache_dtype, field="kv_cache_dtype", table=TORCH_KV_DTYPES)
    plan = None
    if isinstance(backend, AttentionBackend):
        attn = backend
        if page_size is None:
            fail("AK483", "page_size must be given with a backend object (no plan picks it)",
                 field="page_size", expected="an int >= 1", actual=None)
        graphs = bool(cuda_graph)
    else:
        plan = plan_for(arch, backend=None if backend == "auto" else backend, device=dev,
                        page_size=page_size, dtype=compute, kv_cache_dtype=kv,
                        dual_chunk=dual_chunk, prefill_backend=prefill_backend,
                        decode_backend=decode_backend,
                        cuda_graph=cuda_graph if graph_capture else None)
        attn = backend_of(plan, backend_options)
        dual_chunk = plan.settings.get("dual_chunk") != "off"
        page_size = plan.settings["page_size"]
        graphs = bool(cuda_graph) if cuda_graph is not None else bool(plan.settings.get("cuda_graph"))
    graphs = graphs and cuda_graph is not False and (dev.type == "cuda" or not graph_capture)
    layers = model_layers(arch, dual_chunk=dual_chunk)
    weights = Weights(tensors, dtype=COMPUTE_DTYPES[compute], device=dev)
    num_pages = -(-max_tokens // page_size)
    from attnkit.runner.engine.graphs import GraphRunner, buckets_of, reserve_bytes

    scratch = GraphRunner.scratch_pages_for(max(buckets_of(max_num_seqs)), page_size) if graphs else 0
    reserve = reserve_bytes(arch, max_num_seqs, COMPUTE_DTYPES[compute]) if graphs and graph_capture else 0
    check_cache_room(layers, num_pages=num_pages + scratch, page_size=page_size,
                     kv_dtype=TORCH_KV_DTYPES[kv], device=dev, reserve=reserve)
    cache = PagedKVCache(layers, num_pages=num_pages + scratch, page_size=page_size,
                         dtype=TORCH_KV_DTYPES[kv], device=dev)
    engine = cls(DecoderModel(arch, weights, layers=layers), attn, cache,
                 PageLedger(num_pages, page_size, scratch=scratch))
    engine.plan = plan
    if graphs:
        try:
            engine.graphs = GraphRunner(engine, max_batch=max_num_seqs, capture=graph_capture,
                                        explicit=cuda_graph is True, progress=progress)
        except AttnkitError as err:
            if cuda_graph is True or err.code != "AK489":
                raise
            # --cuda-graph auto: the plan said these backends capture; decode eagerly, loudly
            warnings.warn(f"decode graphs not captured, decoding eagerly: {err}", UserWarning,
                          stacklevel=3)
    return engine
