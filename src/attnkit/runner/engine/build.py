"""``Engine.from_pretrained``: checkpoint -> plan -> KV cache -> model (-> decode graphs).

With ``tp_size`` N > 1 the plan is made (and a tp_size it rejects refused, AK305) before any
process starts; then the N ranks (launch.py, ranks.py) each build their shard from the same recipe
(``build_shard``: rank 0's plan, never re-planned), and the Engine on this process, rank 0,
drives the others (engine.py ``_eager``).
"""
from __future__ import annotations

import dataclasses
import os
import warnings
import weakref
from typing import Any, Mapping, Sequence, TextIO

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import AttnkitError, fail
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import TORCH_KV_DTYPES, PagedKVCache
from attnkit.planning.request import PlanRequest
from attnkit.runner.engine.checks import check_count, coded_args, device_of
from attnkit.runner.engine.setup import (backend_of, cache_room_error, check_page_count, model_layers,
                                         plan_for, runner_request, unplanned_settings)
from attnkit.runner.layers.parallel import SINGLE, TensorParallel
from attnkit.runner.models.base import DecoderModel
from attnkit.runner.models.config import architecture_of
from attnkit.runner.models.weights import Weights, read_checkpoint


@coded_args("AK483")
def from_pretrained(cls, source: Any, *, request: PlanRequest | Mapping[str, Any] | None = None,
                    backend: str | AttentionBackend | None = None,
                    page_size: int | None = None, dtype: torch.dtype | str | None = None,
                    device: torch.device | str = "cpu", max_tokens: int = 4096,
                    kv_cache_dtype: torch.dtype | str | None = None,
                    dual_chunk: bool | None = None,
                    prefill_backend: str | None = None, decode_backend: str | None = None,
                    backend_options: Mapping[str, Any] | None = None,
                    cuda_graph: bool | None = None, graph_capture: bool = True,
                    max_num_seqs: int = 256, progress: TextIO | None = None,
                    tp_size: int | None = None, tp_timeout: float = 300.0,
                    require: Sequence[str] = ()):
    """source: a local model directory (config.json + *.safetensors) or an in-memory
    transformers model.
    request: ``attnkit plan``'s settings (a PlanRequest or a dict); the keywords below that
    are planning settings are spellings of its fields, set over it, and the whole request is
    parsed once and handed to the planner unchanged. Every setting left unset is the
    planner's to fill (dtype: the config's, fp16 where the device has no bf16; page size;
    CUDA graphs ...), and the engine runs what the plan says (``engine.plan.run``).
    backend (attention_backend): a registered name or alias, checked by attnkit's planner
    against the model, device, dtypes and page size (every reason, the planner's codes);
    "auto" or None lets the planner choose (a hybrid if prefill and decode differ); an
    AttentionBackend object is used as is, unchecked (page_size must then be given; the
    dtype defaults by the planner's rule).
    prefill_backend / decode_backend: a name for one phase only (the planner checks that
    both phases share one cache layout and page size; a hybrid runs them). A prefill
    backend named runs every prefill-like step; left open, the plan may give steps over a
    cached prefix a separate extend backend (Plan.extend_backend), which the hybrid routes to.
    dtype / kv_cache_dtype: names (fp32, bf16, fp8_e4m3 ...) or torch dtypes.
    max_tokens: KV-cache room, in tokens, over all live sequences.
    dual_chunk: None follows the config's dual_chunk_attention_config; False runs plain
    RoPE attention as transformers does (exact while a sequence fits one chunk_size).
    cuda_graph: decode steps of up to ``max_num_seqs`` sequences as CUDA graphs, one per
    batch-size bucket (graphs.py), captured now (``progress``: a stream for a line about
    it). None follows the plan (--cuda-graph auto: on for CUDA plans whose backends
    declare cuda_graph; off with a backend object); True asks the planner for backends that
    capture and is AK489 where graphs cannot run; False decodes eagerly (on CUDA, with a decode
    backend that implements the capture contract, through the same static steps, uncaptured:
    graphs on or off give the same tokens).
    graph_capture: False runs the graph runner's static-buffer path eagerly, without
    capturing (any device; for tests of its bookkeeping).
    tp_size: tensor-parallel ranks (launch.py): N processes, this one rank 0, one per GPU
    from ``device`` on (NCCL) or N CPU processes (gloo); the source must be a model
    directory (each rank reads its shard) and the backend a name; decode runs eagerly
    (cuda_graph=True is AK489). tp_timeout: seconds a step may take on the ranks before the
    run ends with AK482 (starting a rank may take max(tp_timeout, 120 s)).
    require: numerics every chosen backend must declare ("batch_invariant", "deterministic";
    ``--require``): planned only (a backend object is not planned: AK483)."""
    obj = backend if isinstance(backend, AttentionBackend) else None
    req = runner_request(request, backend=None if obj else backend, page_size=page_size,
                         dtype=dtype, kv_cache_dtype=kv_cache_dtype, dual_chunk=dual_chunk,
                         prefill_backend=prefill_backend, decode_backend=decode_backend,
                         cuda_graph=cuda_graph, tp_size=tp_size,
                         require=list(require) or None)
    check_count("max_tokens", max_tokens, minimum=1)
    if isinstance(tp_timeout, bool) or not isinstance(tp_timeout, (int, float)) or not tp_timeout > 0:
        fail("AK483", f"tp_timeout must be a number of seconds > 0, got {tp_timeout!r}",
             field="tp_timeout", expected="> 0", actual=repr(tp_timeout))
    if (req.tp_size or 1) > 1:
        _check_sharded(source, obj, req.cuda_graph, req.tp_size)
    check_count("max_num_seqs", max_num_seqs, minimum=1)
    if graph_capture not in (True, False):
        fail("AK483", f"graph_capture must be True or False, got {graph_capture!r}",
             field="graph_capture", expected="bool", actual=repr(graph_capture))
    asked = req.cuda_graph                  # graph_capture=False: graphs anywhere, unplanned
    if not graph_capture:
        req = dataclasses.replace(req, cuda_graph=None)
    dev = device_of(device)
    if asked and graph_capture and dev.type != "cuda":
        fail("AK489", f"cuda_graph=True: CUDA graphs capture CUDA kernels, and the engine runs on "
                      f"{dev}; use cuda_graph=None (auto) or False", field="cuda_graph",
             expected=False, actual=True)
    cfg, tensors = read_checkpoint(source)
    arch = architecture_of(cfg)
    plan = None
    if obj is not None:
        attn = obj
        if req.require:
            fail("AK483", f"require={list(req.require)} needs a planned backend (a name or 'auto'): "
                          "a backend object is not checked against the declarations",
                 field="require", expected="a backend name", actual=type(obj).__name__)
        if req.page_size is None:
            fail("AK483", "page_size must be given with a backend object (no plan picks it)",
                 field="page_size", expected="an int >= 1", actual=None)
        compute, kv = unplanned_settings(arch, req, dev)
        page_size, dual, graphs = req.page_size, req.dual_chunk != "off", bool(asked)
    else:
        plan = plan_for(arch, req, dev)
        run = plan.run
        dev = torch.device(run.device.torch_device())
        compute, kv, page_size, dual = run.dtype, run.kv_cache_dtype, run.page_size, run.dual_chunk
        if run.tp_size > 1:                 # the plan is good: now start the ranks
            return _sharded(cls, source, plan, dev=dev, max_tokens=max_tokens,
                            backend_options=backend_options, timeout=float(tp_timeout))
        attn = backend_of(run, backend_options)
        graphs = run.cuda_graph if graph_capture or asked is None else asked
    graphs = graphs and asked is not False and (dev.type == "cuda" or not graph_capture)
    # graphs off on CUDA: a decode backend with the capture contract still decodes through the
    # graph runner's static steps, run eagerly, so graphs on and off compute the same tokens
    uncaptured = not graphs and dev.type == "cuda" and graph_capture and captures(attn)
    graphs, graph_capture = graphs or uncaptured, graph_capture and not uncaptured
    layers = model_layers(arch, dual_chunk=dual)
    num_pages = -(-max_tokens // page_size)
    from attnkit.runner.engine.graphs import GraphRunner, buckets_of, reserve_bytes

    scratch = GraphRunner.scratch_pages_for(max(buckets_of(max_num_seqs)), page_size) if graphs else 0
    reserve = reserve_bytes(arch, max_num_seqs, TORCH_KV_DTYPES[compute]) if graphs and graph_capture else 0
    engine = assemble(cls, arch, tensors, layers=layers, backend=attn, page_size=page_size,
                      compute=compute, kv=kv, device=dev, num_pages=num_pages, scratch=scratch,
                      reserve=reserve)
    engine.plan = plan
    if graphs:
        try:
            engine.graphs = GraphRunner(engine, max_batch=max_num_seqs, capture=graph_capture,
                                        explicit=asked is True, progress=progress)
        except AttnkitError as err:
            if asked is True or (err.code != "AK489" and not uncaptured):
                raise
            if not uncaptured:
                # --cuda-graph auto: the plan said these backends capture; decode eagerly, loudly
                warnings.warn(f"decode graphs not captured, decoding eagerly: {err}", UserWarning,
                              stacklevel=3)
    return engine


def captures(backend: AttentionBackend) -> bool:
    """Whether ``backend`` (a hybrid: its decode backend) implements the capture contract."""
    inner = getattr(backend, "decode", backend)
    return type(inner).capture_plan is not AttentionBackend.capture_plan


def assemble(cls, arch, tensors, *, layers, backend: AttentionBackend, page_size: int,
             compute: str, kv: str, device: torch.device, num_pages: int, scratch: int = 0,
             reserve: int = 0, tp: TensorParallel = SINGLE):
    """The Engine of this rank: its shard of the model (``tp``), a KV cache of its heads
    (num_pages + scratch pages, checked to fit with ``reserve`` bytes to spare), its page
    allocator."""
    local = tuple(tp.local(l) for l in layers)
    check_page_count(num_pages + scratch, page_size)
    try:
        cache = PagedKVCache(local, num_pages=num_pages + scratch, page_size=page_size,
                             dtype=TORCH_KV_DTYPES[kv], device=device, reserve=reserve)
    except AttnkitError as err:
        if err.code != "AK431":
            raise
        raise cache_room_error(err, num_pages=num_pages + scratch, page_size=page_size) from None
    weights = Weights(tensors, dtype=TORCH_KV_DTYPES[compute], device=device)
    return cls(DecoderModel(arch, weights, layers=layers, tp=tp), backend, cache,
               PageAllocator(num_pages, page_size=page_size, scratch=scratch))


def build_shard(cls, recipe: dict, group):
    """One rank's Engine from rank 0's recipe (its plan's RunSpec; every rank the same)."""
    cfg, tensors = read_checkpoint(recipe["source"])
    arch = architecture_of(cfg)
    run = recipe["run"]
    layers = model_layers(arch, dual_chunk=run.dual_chunk)
    local = group.tp.local(layers[0])
    planned = (run.heads_per_rank, run.kv_heads_per_rank)
    if (local.num_heads, local.num_kv_heads) != planned:
        fail("AK900", f"rank {group.rank} would hold {local.num_heads} heads / "
                      f"{local.num_kv_heads} KV heads per layer; the plan says {planned}",
             field="heads_per_rank", expected=planned, actual=(local.num_heads, local.num_kv_heads))
    return assemble(cls, arch, tensors, layers=layers, backend=backend_of(run, recipe["options"]),
                    page_size=run.page_size, compute=run.dtype, kv=run.kv_cache_dtype,
                    device=group.device, num_pages=-(-recipe["max_tokens"] // run.page_size),
                    tp=group.tp)


def _check_sharded(source: Any, backend: AttentionBackend | None, cuda_graph: bool | None,
                   tp_size: int) -> None:
    """What tp_size > 1 cannot take, refused before anything is read or started."""
    if not isinstance(source, (str, os.PathLike)):
        fail("AK483", f"tp_size {tp_size}: each rank reads its shard of the checkpoint from a "
                      f"model directory; an in-memory model ({type(source).__name__}) cannot be "
                      "split that way (save_pretrained it first)", field="source",
             expected="a model directory", actual=type(source).__name__)
    if backend is not None:
        fail("AK483", f"tp_size {tp_size}: every rank builds its own backend, so name it "
                      f"(backend={backend.name!r}) instead of passing an object", field="backend",
             expected="a backend name or 'auto'", actual=type(backend).__name__)
    if cuda_graph is True:
        fail("AK489", f"cuda_graph=True with tp_size {tp_size}: the runner does not capture "
                      "decode graphs under tensor parallelism (it decodes eagerly); use "
                      "cuda_graph=None (auto) or False", field="cuda_graph", expected=False,
             actual=True)


def _sharded(cls, source, plan, *, dev: torch.device, max_tokens: int,
             backend_options: Mapping[str, Any] | None, timeout: float):
    """Start (or reuse) the ranks, build every rank's shard, return rank 0's Engine."""
    from attnkit.runner.engine import launch

    if backend_options is not None and not isinstance(backend_options, Mapping):
        backend_of(plan.run, backend_options)       # AK483, worded once (setup.py)
    if plan.run.cuda_graph:
        warnings.warn("tensor parallelism decodes eagerly: the decode graphs the plan allows "
                      "are not captured with tp_size > 1", UserWarning, stacklevel=4)
    recipe = {"source": os.fspath(source), "run": plan.run, "options": dict(backend_options or {}),
              "max_tokens": max_tokens}
    tp_size = plan.run.tp_size
    group = launch.acquire(tp_size, dev, timeout=timeout)
    if group.rank == 0:
        key = group.new_key()
        with group.guard("loading the model on every rank"):
            group.send("load", key, recipe)
            engine, err = group.load(lambda: build_shard(cls, recipe, group))
    else:                                           # torchrun: rank 0's recipe, not ours
        kind, key, recipe, _ = group.receive()
        if kind != "load":
            fail("AK482", f"tensor-parallel rank {group.rank} expected rank 0's model, got a "
                          f"{kind!r} message (the ranks run different programs)", field="tp_size",
                 actual=tp_size)
        engine, err = group.load(lambda: build_shard(cls, recipe, group))
    if err is not None:
        raise err
    engine.plan, engine.ranks, engine.rank_key = plan, group, key
    if group.rank == 0:
        weakref.finalize(engine, group.forget, key)
    return engine
