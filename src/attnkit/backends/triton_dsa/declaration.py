"""What the triton_dsa backend serves, as torch-free data (checked by tests/conformance):
DeepSeek sparse attention (DSA) layers only, MLA with a lightning indexer (docs/dsa.md).

``check`` (the planner) and ``runtime_check`` (the backends' envelope) say what the data
cannot: every layer it is handed must be a DSA layer (a plain MLA layer belongs to triton_mla).
"""
from __future__ import annotations

from typing import Any, Mapping

from attnkit.backends.gpu_runs import H200_2026_12_02
from attnkit.registry.capabilities import BackendDeclaration, Capabilities
from attnkit.registry.kernels import KernelVariant

# tl.arange extents, so powers of two: DeepSeek-V3.2's sizes on the GPU (latent 512 + 64,
# indexer 64 heads x 128), toy sizes on the interpreter (tests/triton_dsa, tests/conformance).
MLA_DIMS = ((512, 64), (64, 16))
SPARSE_DIMS = ((64, 128), (4, 32))

# The sparse attention kernel's variants (registry/kernels.py): the plan orders them per role and
# measured bucket; without a plan the first that can take the call runs, in this order: the
# Gluon kernel where it can run, then the Triton kernel, which takes every call.
ROLES = ("prefill", "extend", "decode")
VARIANTS = (
    KernelVariant("sparse_ws", ROLES, "Gluon warp-specialised sparse MLA: the selected latent "
                  "rows gathered by cp.async into a shared-memory ring, one Q.K per tile for 64 "
                  "heads, P.V split over two warpgroups", compute_capability=((9, 0), (9, 0)),
                  triton=("3.6", "3.7"), dtypes=("bf16",), kv_cache_dtypes=("bf16",),
                  min_heads=64),
    KernelVariant("sparse_tile", ROLES, "Triton sparse MLA: triton_mla's absorbed tile over the "
                  "gathered rows; every dtype, latent width and head count"),
)

DECLARATION = BackendDeclaration(
    name="triton_dsa",
    impl="attnkit.backends.triton_dsa.backend:TritonDSABackend",
    description="Triton DeepSeek sparse attention: the indexer's scores in a Triton kernel, "
                "top-k by torch.topk over (score, position) keys, absorbed MLA over each "
                "token's selected latent rows. Serves only DSA layers.",
    capabilities=Capabilities(
        platforms=("cuda",),
        compute_capability=((8, 0), None),
        kinds=("mla",),
        head_dims="any",            # nope / v widths go through torch bmm
        dtypes=("fp32", "fp16", "bf16"),
        kv_cache_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3"),
        page_sizes=(1, 16, 32, 64),
        phases=("prefill", "decode"),
        features=frozenset({"sparse_topk", "cuda_graph"}),
        requires=("torch", "triton"),
        mla_dims=MLA_DIMS,
        sparse_dims=SPARSE_DIMS,
        sparse_topks="any",         # the index list is read in masked tiles of any length
        index_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3"),
        verified=(H200_2026_12_02,),
    ),
    variants=VARIANTS,
    launch_config="attnkit.backends.triton_dsa.configs:launch_config",
    check="attnkit.backends.triton_dsa.declaration:check",
    runtime_check="attnkit.backends.triton_dsa.declaration:runtime_check",
)


def check(*, model, platform, phase: str, settings: Mapping[str, Any]) -> list[tuple]:
    """Planner hook: the model's layers without sparse_topk, which this backend cannot run."""
    from attnkit.model.summary import layer_ranges

    plain = [l.layer_id for l in model.layers if getattr(l, "sparse_topk", None) is None]
    if not plain:
        return []
    return [("sparse_topk", "sparse_topk on every layer", plain,
             f"serves only DeepSeek sparse attention layers; {model.name} has dense layers "
             f"{layer_ranges(plain)}")]


def runtime_check(spec, *, page_size: int) -> None:
    """AK440 for a layer without sparse_topk: this backend computes DSA only."""
    if spec.sparse_topk is None:
        from attnkit.errors import fail
        fail("AK440", f"backend 'triton_dsa' does not serve layer {spec.layer_id}: it has no "
                      "sparse_topk (a lightning indexer); the backend computes only DeepSeek "
                      "sparse attention (plain MLA layers: triton_mla)",
             field="layer.spec.sparse_topk", expected="SparseTopK", actual=None)
