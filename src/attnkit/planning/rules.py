"""Rules: ordered functions that fill in what the user left unset, or reject what conflicts.

A rule reads a read-only ``View`` (model, platform, request, settings and backends chosen so
far) and yields ``Fill``s (a field it fills, and why) or warning strings; it raises an
``AttnkitError`` (3xx) for a conflict, with every fix in ``solutions``. The solver applies
fills and records each as ``{field, from, to, rule, reason}``. A rule never changes a
value the user set (a fill is never an override): the solver refuses such a fill as an
internal error.

``BEFORE`` rules run before backends are chosen, ``AFTER`` rules once they are. Whether a
backend supports the model's kind (MHA/MLA), every layer's features, verify (speculative)
and CUDA graphs (--cuda-graph on) is checked per candidate from its declaration
(reasons.py); --cuda-graph auto is decided once the backends are chosen (cuda_graph_rule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from attnkit.hardware.platform import compute_dtypes
from attnkit.model.spec import ModelAttention
from attnkit.planning.conflicts import conflict, page_size_refused
from attnkit.planning.pages import DEFAULT_PAGE_SIZE, accepts, common_page_sizes
from attnkit.planning.view import Release, View
from attnkit.registry.capabilities import DTYPES

PHASE_FIELDS = {"prefill": "prefill_attention_backend", "decode": "decode_attention_backend"}


@dataclass(frozen=True)
class Fill:
    """A value a rule fills in where the user set none, and why. A rule that fills a
    backend also says how the user takes that choice back (``release``), for the error
    should the backend then not serve."""
    field: str          # a settings key, or "prefill_backend" / "decode_backend"
    to: Any
    reason: str
    release: Release | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    fn: Callable[[View], Iterator[Fill | str]]


# ---- before backends are chosen -------------------------------------------------------------

def config_dtype(model: ModelAttention, platform: Any) -> tuple[str, str]:
    """The compute dtype the model config implies on ``platform``, and why."""
    cfg = model.dtype
    if cfg in DTYPES:
        dtype, why = cfg, f"model config dtype is {cfg}"
    elif cfg == "fp64":
        dtype, why = "fp32", ("model config dtype is fp64 (float64); no attnkit backend computes in fp64, "
                              "so fp32, the widest compute dtype")
    elif cfg is None:
        dtype, why = "bf16", "the model config names no dtype; bf16 is the default"
    else:
        dtype, why = "bf16", f"model config dtype {cfg!r} is not a compute dtype; bf16 is the default"
    if dtype not in compute_dtypes(platform):
        dtype, why = "fp16", f"{why}; {platform.name} ({_sm(platform)}) cannot compute in bf16 (CUDA needs sm80+), so fp16"
    return dtype, why


def _sm(platform: Any) -> str:
    cc = getattr(platform, "capability", None)
    return f"sm{cc[0]}{cc[1]}" if cc else platform.kind


def dtype_rule(v: View) -> Iterator[Fill | str]:
    if v.request.dtype is None:
        yield Fill("dtype", *config_dtype(v.model, v.platform))
    elif v.request.dtype not in compute_dtypes(v.platform):
        have = compute_dtypes(v.platform)
        raise conflict("AK309", f"--dtype {v.request.dtype}: {v.platform.name} ({_sm(v.platform)}) cannot compute "
                       f"in {v.request.dtype} (bf16 needs CUDA sm80+); it computes in {', '.join(have)}",
                       field="dtype", actual=v.request.dtype, expected=list(have),
                       solutions=["use --dtype fp16", "omit --dtype (attnkit fills fp16 on this device)",
                                  "plan for a device with bf16 (sm80+: a100, l4, h100)"],
                       before=v.command(), after=v.command(dtype="fp16"))


def kv_cache_dtype_rule(v: View) -> Iterator[Fill | str]:
    if v.request.kv_cache_dtype is None:
        yield Fill("kv_cache_dtype", v.settings["dtype"], "KV cache stored in the compute dtype "
                       "unless --kv-cache-dtype is set")


def tensor_parallel_rule(v: View) -> Iterator[Fill | str]:
    """Split query heads over ranks; replicate KV heads (or the MLA latent) when ranks outnumber them."""
    tp = v.request.tp_size or 1
    layers = v.model.layers
    if not layers:
        return
    bad = sorted({l.num_heads for l in layers if l.num_heads % tp})
    bad_kv = sorted({l.num_kv_heads for l in layers if l.kind == "mha" and tp <= l.num_kv_heads
                     and l.num_kv_heads % tp} | {l.num_kv_heads for l in layers if l.kind == "mha"
                                                  and tp > l.num_kv_heads and tp % l.num_kv_heads})
    if bad or bad_kv:
        heads = layers[0].num_heads
        shapes = {(l.kind, l.num_heads, l.num_kv_heads) for l in layers}
        # every size that splits every layer (not only powers of two: tp 3 splits 6 heads)
        valid = [t for t in range(1, min(h for _, h, _ in shapes) + 1) if all(
            h % t == 0 and (kind == "mla" or (kv % t == 0 if t <= kv else t % kv == 0))
            for kind, h, kv in shapes)]
        what = (f"{bad[0]} query heads" if bad else f"{bad_kv[0]} KV heads")
        raise conflict("AK305", f"--tp-size {tp} does not divide {what} of {v.model.name} evenly; "
                       f"valid tensor-parallel sizes: {', '.join(map(str, valid))}",
                       field="tp_size", actual=tp, expected=valid,
                       solutions=[f"use --tp-size {t}" for t in sorted(valid, key=lambda t: (abs(t - tp), t))[:2]],
                       before=v.command(), after=v.command(tp_size=max(t for t in valid if t <= tp)))
    first = layers[0]
    yield Fill("heads_per_rank", first.num_heads // tp,
                   f"{first.num_heads} query heads / tp {tp}" if tp > 1 else "no tensor parallelism")
    if first.kind == "mla":
        yield Fill("kv_heads_per_rank", 1, "MLA caches one latent row per token; every rank keeps "
                       "the whole latent (replicated)" if tp > 1 else "MLA caches one latent row per token")
    elif tp > first.num_kv_heads:
        yield Fill("kv_heads_per_rank", 1, f"tp {tp} > {first.num_kv_heads} KV heads: each KV head is "
                       f"replicated on {tp // first.num_kv_heads} ranks")
    else:
        yield Fill("kv_heads_per_rank", first.num_kv_heads // tp,
                       f"{first.num_kv_heads} KV heads / tp {tp}" if tp > 1 else "no tensor parallelism")


def dual_chunk_rule(v: View) -> Iterator[Fill | str]:
    """Dual chunk attention (Qwen2.5-1M): pick a backend that implements it, or reject with both fixes."""
    dca = next((l.dual_chunk for l in v.model.layers if l.dual_chunk is not None), None)
    mode = v.request.dual_chunk or "auto"
    if dca is None:
        if mode == "on":
            yield f"--dual-chunk on: {v.model.name} has no dual_chunk_attention_config; nothing to turn on"
        return
    if mode == "off":
        yield (f"dual chunk attention is off: {v.model.name} was trained with it; contexts beyond "
               f"chunk_size {dca.chunk_size} tokens lose quality (plain RoPE attention is exact below it)")
        return
    yield Fill("dual_chunk", "on", f"model config sets dual_chunk_attention_config (chunk_size "
                   f"{dca.chunk_size}, local_size {dca.local_size}) and --dual-chunk is {mode}")
    yield Fill("dual_chunk_len", dca.chunk_len, "chunk_size - local_size; a KV page must not "
                   "straddle two chunks, so the page size must divide it")
    serving = [n for n, d in v.registry.items() if "dual_chunk" in d.capabilities.features
               and n not in v.request.deny]
    # every named backend that lacks dual chunk, by the request field that names it: one fix for all
    lacking = {v.request.backend_field(p): n for p, n in v.explicit.items()
               if n is not None and "dual_chunk" not in v.registry[n].capabilities.features}
    if lacking:
        named = " and ".join(f"--{f.replace('_', '-')} {n}" for f, n in lacking.items())
        flags = " ".join(f"--{f.replace('_', '-')} {serving[0]}" for f in lacking) if serving else ""
        drop = _refused_settings(v, serving[0]) if serving else []
        fixes = ([f"use {flags} (implements dual chunk attention)"
                  + (f" and drop {' and '.join('--' + f.replace('_', '-') for f in drop)}, which "
                     f"{serving[0]} refuses" if drop else "")] if serving else [])
        fixes.append("use --dual-chunk off (plain attention; quality drops beyond chunk_size "
                     f"{dca.chunk_size} tokens)")
        field = next(iter(lacking))
        raise conflict("AK302", f"{v.model.name} uses dual chunk attention (chunk_size {dca.chunk_size}, "
                       f"local_size {dca.local_size}) but {named} "
                       + ("does" if len(lacking) == 1 else "do") + " not implement it"
                       + ("" if serving else "; no registered backend implements it"),
                       field=field, actual=lacking[field], expected=serving, solutions=fixes,
                       before=v.command(),
                       after=(v.command(**{f: serving[0] for f in lacking}, **{f: None for f in drop}) if serving
                              else v.command(dual_chunk="off")))
    if not all(v.explicit.values()):
        if not serving:
            raise conflict("AK302", f"{v.model.name} uses dual chunk attention but no registered backend "
                           "implements it" + (" (the ones that do are denied)" if v.request.deny else ""),
                           field="dual_chunk", actual=mode, expected=["off"],
                           solutions=["use --dual-chunk off (plain attention; quality drops beyond "
                                      f"chunk_size {dca.chunk_size} tokens)"],
                           before=v.command(), after=v.command(dual_chunk="off"))
        off = Release("AK302", "dual_chunk", "on", {"dual_chunk": "off"},
                      "use --dual-chunk off (plain attention; quality drops beyond chunk_size)")
        for phase in ("prefill", "decode"):
            if v.explicit[phase] is None:
                yield Fill(f"{phase}_backend", serving[0], f"model uses dual chunk attention; "
                           f"{serving[0]} is the backend that implements it", off)


GRAPH_PLATFORMS = ("cuda", "rocm")     # where torch.cuda.graph captures (CUDA, HIP graphs)


def cuda_graph_device_rule(v: View) -> Iterator[Fill | str]:
    """--cuda-graph on needs a GPU: refuse it on a CPU / MPS / XPU plan, with the fixes."""
    if v.request.cuda_graph and v.platform.kind not in GRAPH_PLATFORMS:
        raise conflict("AK311", f"--cuda-graph on: CUDA graphs capture GPU kernels, and "
                       f"{v.platform.name} is a {v.platform.kind} device",
                       field="cuda_graph", actual=True, expected=[False],
                       solutions=["drop --cuda-graph (auto: on where the device is CUDA and the "
                                  "decode backend declares it)", "plan for a CUDA device (--device h100)"],
                       before=v.command(), after=v.command(cuda_graph=None))
    return iter(())


def decode_only_rule(v: View) -> Iterator[Fill | str]:
    """Settings that act on decode steps only (CUDA graphs capture decode steps; draft tokens
    are verified in decode), set for a model without a decode phase (an encoder): a warning
    says they change nothing, as for a --decode-attention-backend (the value stands)."""
    if "decode" in v.phases:
        return
    for flag, on in (("--cuda-graph on", v.request.cuda_graph is True),
                     (f"--speculative-tokens {v.request.speculative_tokens}", bool(v.request.speculative_tokens))):
        if on:
            yield (f"{flag} ignored: {v.model.name} is encoder-only and has no decode phase "
                   "(it acts on decode steps only)")


def _refused_settings(v: View, name: str) -> list[str]:
    """The user's own settings (CUDA graph, speculative tokens, KV dtype, page size) ``name`` refuses."""
    from attnkit.planning.reasons import check_backend, model_needs

    settings = {k: val for k, val in v.settings.items() if val is not None}
    settings["page_size"] = v.request.page_size
    found = {r.field for phase in ("prefill", "decode")
             for r in check_backend(v.registry[name], model=v.model, needs=model_needs(v.model), platform=v.platform,
                                    phase=phase, settings=settings)}
    return [f for f in ("cuda_graph", "speculative_tokens", "kv_cache_dtype", "page_size")
            if f in found and v.request.is_set(f)]


# ---- after backends are chosen --------------------------------------------------------------

def page_size_rule(v: View) -> Iterator[Fill | str]:
    """One page size every chosen backend accepts: 16 if all do, else the smallest common one;
    unless the device profile measured the decode backend more than page_gain.MARGIN faster
    at another common size (over the same decode buckets), which is then filled, its reason
    quoting both measured rates."""
    if v.model.varlen_only:      # the varlen call keeps no KV cache: no backend's page sizes apply
        if v.request.page_size is None:
            yield Fill("page_size", DEFAULT_PAGE_SIZE, f"default {DEFAULT_PAGE_SIZE}; {v.model.name} keeps no "
                       "KV cache (the varlen call), so no backend's page sizes apply")
        return
    chosen = sorted({n for n in v.backends.values() if n})
    decls = [v.registry[n] for n in chosen]
    valid = common_page_sizes(decls, v.model)
    if v.request.page_size is not None:
        if not accepts(decls, v.model, v.request.page_size):
            raise page_size_refused(v, f"--page-size {v.request.page_size} is not accepted by "
                                       f"{' + '.join(chosen)}; valid sizes: {{valid}}", valid, nearest_first=True)
        return
    if not valid:
        raise conflict("AK308", f"no page size is accepted by every chosen backend ({', '.join(chosen)})",
                       field="page_size", actual=None, expected=[],
                       solutions=["use one --attention-backend for both phases"],
                       before=v.command(), after=v.command())
    size = DEFAULT_PAGE_SIZE if DEFAULT_PAGE_SIZE in valid else valid[0]
    who = " and ".join(chosen)
    gain = v.page_gain(size, valid)
    if gain is not None:
        yield Fill("page_size", gain[0], f"{gain[1]}; accepted by {who}")
        return
    yield Fill("page_size", size, f"default {size}, accepted by {who}" if size == DEFAULT_PAGE_SIZE
               else f"smallest page size accepted by {who} ({DEFAULT_PAGE_SIZE} is not)")


def cuda_graph_rule(v: View) -> Iterator[Fill | str]:
    """--cuda-graph auto: on for a CUDA plan whose decode backend declares cuda_graph (and
    whose decode checks pass with it), else off; each with why. Only decode steps are
    captured (prefill runs eagerly), so the prefill backend need not declare it, as
    --cuda-graph on checks only decode candidates (reasons.py, AK109). A value the user set
    stands."""
    if v.request.cuda_graph is not None:
        return
    decode = v.backends.get("decode")
    if decode is None:
        yield Fill("cuda_graph", False, "no decode phase: nothing to capture")
        return
    if v.platform.kind != "cuda":
        yield Fill("cuda_graph", False, f"--cuda-graph auto: {v.platform.kind} is not a CUDA device")
        return
    if "cuda_graph" not in v.registry[decode].capabilities.features or _refuses_capture(v, decode):
        yield Fill("cuda_graph", False, f"--cuda-graph auto: the decode backend {decode} cannot be "
                   "captured in a CUDA graph here, so decode runs eagerly")
        return
    prefill, extend = v.backends.get("prefill"), v.backends.get("extend")
    if extend:
        eager = f"prefill ({prefill}) and extend ({extend}) run"
    else:
        eager = f"prefill ({prefill}) runs" if prefill and prefill != decode else "prefill runs"
    yield Fill("cuda_graph", True, f"--cuda-graph auto on {v.platform.kind}: the decode backend "
               f"{decode} declares cuda_graph; decode steps replay as CUDA graphs, {eager} eagerly")


def _refuses_capture(v: View, name: str) -> bool:
    """Whether ``name``'s decode checks fail once graphs are on (a backend check may say so)."""
    from attnkit.planning.reasons import check_backend, model_needs

    settings = {k: val for k, val in v.settings.items() if val is not None} | {"cuda_graph": True}
    found = check_backend(v.registry[name], model=v.model, needs=model_needs(v.model),
                          platform=v.platform, phase="decode", settings=settings)
    return any(r.field == "cuda_graph" for r in found)


BEFORE: tuple[Rule, ...] = (
    Rule("dtype-default", dtype_rule),
    Rule("kv-cache-dtype-default", kv_cache_dtype_rule),
    Rule("tensor-parallel", tensor_parallel_rule),
    Rule("dual-chunk", dual_chunk_rule),
    Rule("cuda-graph-device", cuda_graph_device_rule),
    Rule("decode-only", decode_only_rule),
)
AFTER: tuple[Rule, ...] = (
    Rule("page-size", page_size_rule),
    Rule("cuda-graph", cuda_graph_rule),
)
