"""dual_chunk: dual chunk attention (Qwen2.5-1M) over the paged cache.

Torch-free: the planner reads this module. ``check`` says what the capability data cannot:
the backend serves only layers with a ``dual_chunk_attention_config``, and its page size must
divide the chunk length ``cl = chunk_size - local_size`` (a page never straddles two chunks);
``page_sizes`` tells the planner those sizes, so the page size it picks or suggests divides cl.
The rules themselves live in config.py (also torch-free), shared with the runtime.
"""
from __future__ import annotations

from typing import Any, Mapping

from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import BackendDeclaration, Capabilities

DECLARATION = BackendDeclaration(
    name="dual_chunk",
    impl="attnkit.backends.dual_chunk.backend:DualChunkBackend",
    description="Dual chunk attention (intra / successor / inter parts merged by log-sum-exp) "
                "over paged K/V: attnkit's Triton kernels on CUDA, float32 torch math "
                "elsewhere. Serves only models whose config has dual_chunk_attention_config.",
    capabilities=Capabilities(
        # CPU by tests/dual_chunk; CUDA by the same tests marked gpu.
        platforms=("cpu", "cuda"),
        kinds=("mha",),
        head_dims="any",
        dtypes=("fp32", "fp16", "bf16"),
        kv_cache_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
        page_sizes="any",            # any divisor of the chunk length: see page_sizes(), check()
        phases=("prefill", "decode"),
        features=frozenset({"dual_chunk", "cuda_graph"}),   # cuda_graph: the Triton path
        requires=("torch",),
        verified=(H200_2026_11_29,),      # the Triton path (CUDA) and the torch path
    ),
    check="attnkit.backends.dual_chunk.declaration:check",
    page_sizes_for="attnkit.backends.dual_chunk.declaration:page_sizes",
    runtime_check="attnkit.backends.dual_chunk.config:runtime_check",
)


def page_sizes(model) -> frozenset[int] | None:
    """Planner hook: a page never straddles two chunks, so its size divides the chunk length
    ``chunk_size - local_size`` of every dual chunk layer (None: the model has none)."""
    from attnkit.backends.dual_chunk.config import config_problems, divisors

    lens = {l.dual_chunk.chunk_len for l in model.layers
            if l.dual_chunk is not None and not config_problems(l.dual_chunk)}
    return frozenset.intersection(*(frozenset(divisors(n)) for n in lens)) if lens else None


def check(*, model, platform, phase: str, settings: Mapping[str, Any]) -> list[tuple]:
    """Planner hook (see planning/reasons.py): every reason this model cannot run here."""
    from attnkit.backends.dual_chunk.config import config_problems, page_size_problem
    from attnkit.model.summary import layer_ranges

    plain = [l.layer_id for l in model.layers if l.dual_chunk is None]
    if plain:
        return [("dual_chunk", "dual_chunk_attention_config on every layer", plain,
                 f"serves only dual chunk attention; {model.name} has no "
                 f"dual_chunk_attention_config on layers {layer_ranges(plain)}")]
    out: list[tuple] = []
    if phase == "decode" and settings.get("cuda_graph"):
        out += _capture_problems(model, platform)
    seen = set()
    for layer in model.layers:
        config = layer.dual_chunk
        if config in seen:
            continue
        seen.add(config)
        problems = config_problems(config)
        out += problems
        page = settings.get("page_size")
        if not problems and page is not None:
            bad = page_size_problem(config.chunk_len, page)
            if bad:
                out.append(bad)
    return out


# Where the Triton path runs (backend.py: NVIDIA sm80+, head rows up to 256 wide): the only
# path a CUDA graph can capture; elsewhere the torch path loops over requests on the host.
TRITON_MIN_CAPABILITY = (8, 0)
TRITON_MAX_HEAD_DIM = 256


def _capture_problems(model, platform) -> list[tuple]:
    """Why a CUDA-graph decode cannot run the Triton path here (empty if it can)."""
    from attnkit.model.summary import layer_ranges

    cc = getattr(platform, "capability", None)
    if platform.kind == "cuda" and cc is not None and tuple(cc) < TRITON_MIN_CAPABILITY:
        low = TRITON_MIN_CAPABILITY
        return [("cuda_graph", f"sm{low[0]}{low[1]}+ (the Triton path)", f"sm{cc[0]}{cc[1]}",
                 f"captures CUDA graphs on its Triton path only, which needs sm{low[0]}{low[1]}+; "
                 f"{platform.name} is sm{cc[0]}{cc[1]}")]
    wide = [l.layer_id for l in model.layers
            if max(l.head_dim, l.value_dim) > TRITON_MAX_HEAD_DIM]
    if wide:
        return [("cuda_graph", f"head dims <= {TRITON_MAX_HEAD_DIM} (the Triton path)", wide,
                 f"captures CUDA graphs on its Triton path only, whose head rows hold "
                 f"{TRITON_MAX_HEAD_DIM} features; layers {layer_ranges(wide)} are wider")]
    return []
