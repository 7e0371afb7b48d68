"""Vision towers and VLM configs: a ``vision_config`` beside the language model is a component.

Every vision tower attends both ways (``encoder`` layers) and keeps no KV cache. Qwen2.5-VL's
tower attends within windows in most blocks and over the whole image in the blocks listed in
``fullatt_block_indexes``; both run as packed sequences (one per window, one per frame), so a
backend serves them as a batch of independent non-causal sequences. Tokens per image:

    Qwen2.5-VL  (height' // patch) * (width' // patch) patches, height' and width' rounded to a
                multiple of patch * spatial_merge_size; a window holds
                (window_size // patch)^2 patches (64 for 112 / 14)
    CLIP/SigLIP (image_size // patch_size)^2 patches (+ 1 class token for CLIP)
"""
from __future__ import annotations

from attnkit.errors import AttnkitError
from attnkit.model._fields import ConfigReader
from attnkit.model.components import Component, Inputs, Workload
from attnkit.model.layouts import MAX_LAYERS
from attnkit.model.spec import LayerAttention, ModelAttention

QWEN_VL = ("qwen2_5_vl", "qwen2_vl")
# model_type of a vision_config (or of a stand-alone tower) -> how its layers attend
TOWERS = ("qwen2_5_vl", "clip_vision_model", "siglip_vision_model")
# keys of a vision config that change attention, and read by the builders below
VISION_KEYS = ("num_heads", "num_attention_heads", "depth", "num_hidden_layers", "fullatt_block_indexes",
               "window_size", "head_dim")


def tower_type(top_type: str, vision: ConfigReader) -> str:
    """The tower's family: Qwen2.5-VL's vision_config has no model_type of its own."""
    own = vision.str("model_type", default="").lower()
    if top_type in QWEN_VL and own in ("", "qwen2_5_vl", "qwen2_5_vl_vision", "qwen2_vl"):
        return "qwen2_5_vl" if top_type == "qwen2_5_vl" else "qwen2_vl"
    return own


def vision_component(top_type: str, vision: ConfigReader, inputs: Inputs, *, name: str) -> Component:
    """The vision tower as a component (refused with AK521 for a tower attnkit does not know)."""
    kind = tower_type(top_type, vision)
    if kind not in TOWERS:
        return Component(name, "transformers", f"vision_config (model_type {kind or '(none)'!r})", "vision_tower",
                         error=unknown_class(vision, "vision_config", kind or "(none)", TOWERS))
    build = _qwen25_tower if kind == "qwen2_5_vl" else _vit_tower
    model, workload = build(vision, inputs, name=name, kind=kind)
    return Component(name, "transformers", kind, "vision_tower", attention=model, workload=workload)


def _qwen25_tower(r: ConfigReader, inputs: Inputs, *, name: str, kind: str):
    depth = r.int("depth", maximum=MAX_LAYERS)
    heads = r.int("num_heads")
    hidden = r.int("hidden_size")
    if hidden % heads:
        raise r.error("AK506", "hidden_size", f"{r.path('hidden_size')}={hidden} is not divisible by "
                      f"{heads} heads", expected=f"a multiple of {heads}", actual=hidden)
    full = r.list("fullatt_block_indexes")
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < depth for i in full):
        raise r.error("AK505", "fullatt_block_indexes", f"fullatt_block_indexes must list block ids in "
                      f"0 .. {depth - 1}", expected=f"ids in 0 .. {depth - 1}", actual=full[:20])
    patch, merge = r.int("patch_size"), r.int("spatial_merge_size")
    window = r.int("window_size")
    layers = tuple(LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
                                  role="encoder") for i in range(depth))
    windowed = [i for i in range(depth) if i not in set(full)]
    side = max(window // patch, 1)
    height, width = inputs.height or 1024, inputs.width or 1024
    unit = patch * merge
    h, w = max(round(height / unit), 1) * unit // patch, max(round(width / unit), 1) * unit // patch
    tokens = h * w
    notes = (f"blocks {sorted(full)} attend over the whole image (one sequence per frame); the other "
             f"{len(windowed)} attend within windows of {side} x {side} = {side * side} patches "
             f"(window_size {window} // patch_size {patch}), each window its own sequence",
             "2-D rotary positions on q and k (height, width), outside the attention kernel")
    workload = Workload(tokens=tokens, inputs={"height": height, "width": width},
                        formula=f"height {height} and width {width} rounded to multiples of {unit}, // "
                                f"patch_size {patch}: {h} x {w} = {tokens} patches per image",
                        sequence={"full": tokens, "window": min(side * side, tokens)})
    return ModelAttention(name=name, architecture="Qwen2_5_VisionTransformer", layers=layers, dtype=None,
                          source=r.source, notes=notes, encode_only=True), workload


def _vit_tower(r: ConfigReader, inputs: Inputs, *, name: str, kind: str):
    n = r.int("num_hidden_layers", maximum=MAX_LAYERS)
    heads, hidden = r.int("num_attention_heads"), r.int("hidden_size")
    if hidden % heads:
        raise r.error("AK506", "hidden_size", f"{r.path('hidden_size')}={hidden} is not divisible by "
                      f"{heads} heads", expected=f"a multiple of {heads}", actual=hidden)
    size, patch = r.int("image_size"), r.int("patch_size")
    cls = 1 if kind == "clip_vision_model" else 0
    tokens = (size // patch) ** 2 + cls
    layers = tuple(LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
                                  role="encoder") for i in range(n))
    workload = Workload(tokens=tokens, inputs={"height": size, "width": size},
                        formula=f"(image_size {size} // patch_size {patch})^2" + (" + 1 class token" if cls else "")
                                + f" = {tokens} tokens per image (the tower resizes every image to {size})")
    return ModelAttention(name=name, architecture=kind, layers=layers, dtype=None, source=r.source,
                          notes=("absolute position embeddings; every layer attends both ways",),
                          encode_only=True), workload


def unknown_class(r: ConfigReader, key: str, cls: str, known) -> AttnkitError:
    return r.error("AK521", key, f"component class {cls!r} is not one attnkit knows how it attends; it would be "
                   f"a guess to plan it (known: {', '.join(known)})", expected=list(known), actual=cls,
                   details={"class": cls})
