"""Fake declarations, platforms and models for planner tests (no real backend needed)."""
from __future__ import annotations

from attnkit.hardware import Platform
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention
from attnkit.registry.capabilities import BackendDeclaration, Capabilities, MultipleOf

GPU = Platform(kind="cuda", name="Fake GPU", capability=(9, 0), packages={"torch": "2", "triton": "3"},
               preset="fakegpu")
OLD_GPU = Platform(kind="cuda", name="Old GPU", capability=(7, 5), packages={"torch": "2", "triton": "3"})
CPU = Platform(kind="cpu", name="Fake CPU", packages={"torch": "2"}, preset="fakecpu")
BARE_CPU = Platform(kind="cpu", name="CPU without torch", packages={})


def decl(name, **caps) -> BackendDeclaration:
    base = dict(platforms=("cuda", "cpu"), kinds=("mha",), head_dims="any", dtypes=("fp16", "bf16", "fp32"),
                kv_cache_dtypes=("fp16", "bf16", "fp32"), page_sizes="any", features=frozenset(),
                requires=("torch",))
    extra = {k: caps.pop(k) for k in ("aliases", "explicit_only", "check") if k in caps}
    base.update(caps)
    return BackendDeclaration(name=name, impl=f"fake.{name}:B", capabilities=Capabilities(**base), **extra)


def registry(*decls: BackendDeclaration) -> dict[str, BackendDeclaration]:
    return {d.name: d for d in decls}


# A small world shaped like attnkit's: sdpa is MHA-only here (as the brief describes it).
FAKE = registry(
    decl("torch_native", kinds=("mha", "mla"), mla_dims="any",
         kv_cache_dtypes=("fp16", "bf16", "fp32", "fp8_e4m3"),
         features=frozenset({"sliding_window", "logit_softcap", "sinks", "cross_attention", "non_causal",
                             "verify"}), aliases={"torch": "renamed"}),
    decl("sdpa", features=frozenset({"sliding_window", "verify"})),
    decl("triton", platforms=("cuda",), compute_capability=((8, 0), None), requires=("torch", "triton"),
         head_dims=(64, 128), page_sizes=MultipleOf(16), features=frozenset({"sliding_window", "verify"})),
    decl("triton_mla", platforms=("cuda",), kinds=("mla",), mla_dims=((512, 64),), requires=("torch", "triton"),
         page_sizes=(1, 16, 32, 64), features=frozenset({"verify"})),
    decl("dual_chunk", features=frozenset({"dual_chunk"})),
)


def mha(name="toy", *, layers=4, heads=8, kv=2, dim=64, dtype="bf16", **layer_kw) -> ModelAttention:
    return ModelAttention(name=name, architecture="Toy", dtype=dtype, layers=tuple(
        LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=kv, head_dim=dim, **layer_kw)
        for i in range(layers)))


def mla(name="toy-mla", *, layers=3, heads=16, rank=512, rope=64) -> ModelAttention:
    cfg = MLAConfig(kv_lora_rank=rank, qk_rope_head_dim=rope, qk_nope_head_dim=128, v_head_dim=128)
    return ModelAttention(name=name, architecture="ToyMLA", layers=tuple(
        LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=1, head_dim=128 + rope, v_head_dim=128,
                       kind="mla", mla=cfg) for i in range(layers)))


def dca(name="toy-1m") -> ModelAttention:
    return mha(name, dual_chunk=DualChunkConfig(chunk_size=262144, local_size=8192,
                                                original_max_position_embeddings=262144), dim=128)
