"""A feature no attnkit backend declares: say so plainly, and what serves it elsewhere (AK122).

``ELSEWHERE`` is data: per capability-vocabulary feature, what the mechanism is and where it is
served outside attnkit (names checked against those projects' docs and pull requests).
"""
from __future__ import annotations

from attnkit.errors import AttnkitError
from attnkit.model.summary import layer_ranges
from attnkit.planning.conflicts import conflict
from attnkit.planning.view import View

ELSEWHERE: dict[str, tuple[str, str]] = {
    "sparse_topk": ("DeepSeek sparse attention (DSA)",
                    "DeepSeek's FlashMLA sparse attention kernels (github.com/deepseek-ai/FlashMLA) serve it; "
                    "vLLM runs them as its FLASHMLA_SPARSE backend and SGLang through its NSA backend "
                    "(--attention-backend nsa)"),
    "chunked_local": ("chunked local attention (Llama-4)",
                      "FlashAttention-3 computes it (its attention_chunk argument), as SGLang's fa3 backend "
                      "does for Llama-4"),
}


def unserved_features(v: View, features: list[str]) -> AttnkitError:
    parts, fixes = [], []
    for feat in features:
        layers = v.needs.features[feat]
        what, where = ELSEWHERE.get(feat, (feat, ""))
        detail = (what if what != feat else "") + _detail(v, feat)
        parts.append(f"{feat} ({detail + '; ' if detail else ''}layers {layer_ranges(layers)})")
        fixes.append(f"serve {v.model.name} with an engine that implements {what}" + (f": {where}" if where else ""))
    fixes.append("plan a model without " + " and ".join(features))
    return conflict("AK122", f"{v.model.name} needs {'; '.join(parts)}, which no attnkit backend implements: "
                    "no device or flag makes attnkit serve it", field="features", actual=features,
                    expected=sorted({f for d in v.registry.values() for f in d.capabilities.features}),
                    solutions=fixes, before=v.command(), after=v.command(), features=features)


def _detail(v: View, feat: str) -> str:
    layer = next((l for l in v.model.layers if feat in l.features()), None)   # varlen: no layer feature
    if layer is None:
        return ""
    if feat == "sparse_topk":
        t = layer.sparse_topk
        return (f": each query attends to the {t.topk} keys an indexer of {t.index_n_heads} heads x "
                f"{t.index_head_dim} picks")
    if feat == "chunked_local":
        return f": chunks of {layer.attention_chunk} tokens"
    return ""
