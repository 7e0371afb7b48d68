"""Diffusion transformers (a pipeline's denoiser) -> their attention layers and tokens per call.

Every attention here is non-causal and keeps no KV cache between calls: self-attention over the
image or video tokens (``encoder`` layers), joint attention over text and image tokens in one
sequence (MMDiT: ``encoder`` layers over text + image), cross-attention from the video tokens to
the text (``cross`` layers). Tokens per call (docs/models.md):

    latent frames  F' = (frames - 1) // t_vae + 1        (video; t_vae: the VAE's temporal factor)
    image tokens   (height // (s_vae * p)) * (width // (s_vae * p)) * (F' // p_t)

with ``s_vae`` the VAE's spatial factor and ``p`` / ``p_t`` the patch sizes (FLUX and Qwen-Image
pack 2x2 latent patches in the pipeline: p = 2). Joint attention adds the text tokens.
Defaults are each pipeline's own call defaults (its ``__call__`` height, width, frames and
max_sequence_length) or the transformer config's ``sample_size``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnkit.model._fields import ConfigReader
from attnkit.model.components import Inputs, Workload
from attnkit.model.layouts import MAX_LAYERS
from attnkit.model.spec import LayerAttention, ModelAttention
from attnkit.registry.capabilities import dtype_spelled


@dataclass(frozen=True)
class VaeScale:
    """How many pixels one latent covers: ``spatial`` per side, ``temporal`` frames (video)."""
    spatial: int
    temporal: int
    how: str


@dataclass(frozen=True)
class Denoiser:
    """One transformer class: its layers, its tokens, the keys that change its attention."""
    build: Callable[[ConfigReader], tuple[list[LayerAttention], list[str]]]
    tokens: Callable[[ConfigReader, VaeScale, dict[str, int]], tuple[int, int | None, str]]
    defaults: dict[str, int]                   # the pipeline's call defaults
    attention_keys: tuple[str, ...] = ()       # read by build: every other attention-looking key is refused
    video: bool = False


def denoiser_attention(class_name: str, r: ConfigReader, vae: VaeScale, inputs: Inputs, *,
                       name: str) -> tuple[ModelAttention, Workload]:
    """The denoiser's attention and one call's workload (KeyError: an unknown class)."""
    family = DENOISERS[class_name]
    layers, notes = family.build(r)
    used = {**family.defaults, **{k: v for k, v in inputs.given().items() if k in family.defaults}}
    tokens, context, formula = family.tokens(r, vae, used)
    if inputs.frames is not None and not family.video:    # an input the user set is never dropped silently
        notes = [*notes, f"frames = {inputs.frames} ignored: {class_name} makes images, not video"]
    notes = [*notes, "no KV cache is kept between denoising steps: every layer, self- and cross-attention, "
             "is a varlen call (backends declaring varlen), checked as such, with no KV-cache dtype or pages"]
    model = ModelAttention(name=name, architecture=class_name, layers=tuple(layers), dtype=_dtype(r),
                           source=r.source, notes=tuple(notes), encode_only=True)
    return model, Workload(tokens=tokens, context=context, formula=formula, inputs=used)


def attention_keys(class_name: str) -> tuple[str, ...]:
    return DENOISERS[class_name].attention_keys


# -- families -------------------------------------------------------------------------------

def _heads(r: ConfigReader) -> tuple[int, int]:
    return r.int("num_attention_heads"), r.int("attention_head_dim")


def _self(i: int, heads: int, dim: int, role: str = "encoder") -> LayerAttention:
    return LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=heads, head_dim=dim, role=role)


def _wan(r: ConfigReader):
    heads, dim = _heads(r)
    n = r.int("num_layers", maximum=MAX_LAYERS)
    image = r.int("added_kv_proj_dim", default=None) is not None   # I2V: a second cross-attention
    per = 3 if image else 2
    layers = []
    for b in range(n):
        layers += [_self(per * b, heads, dim), _self(per * b + 1, heads, dim, "cross")]
        if image:
            layers.append(_self(per * b + 2, heads, dim, "cross"))
    notes = [f"each of the {n} blocks: self-attention over the video tokens, then cross-attention to "
             "the text" + (" and a second one to the image-encoder tokens (added_kv_proj_dim)" if image else "")]
    if r.has("qk_norm"):
        notes.append(f"qk_norm = {r.cfg['qk_norm']!r}: q and k are normalised before attention; outside the "
                     "attention kernel")
    return layers, notes


def _video_tokens(r: ConfigReader, vae: VaeScale, used: dict[str, int], p: int, pt: int, what: str):
    frames = (used["frames"] - 1) // vae.temporal + 1
    h, w = used["height"] // (vae.spatial * p), used["width"] // (vae.spatial * p)
    tokens = (frames // pt) * h * w
    _some(r, tokens, used)
    formula = (f"((frames {used['frames']} - 1) // {vae.temporal} + 1) // {pt} latent frames x "
               f"height {used['height']} // ({vae.spatial} x {p}) x width {used['width']} // "
               f"({vae.spatial} x {p}) = {frames // pt} x {h} x {w} = {tokens} video tokens{what}")
    return tokens, formula


def _wan_tokens(r, vae, used):
    pt, ph, pw = _patch3(r)
    tokens, formula = _video_tokens(r, vae, used, ph, pt, "")
    return tokens, used["text_tokens"], formula + f"; cross-attention keys: {used['text_tokens']} text tokens"


def _patch3(r: ConfigReader) -> tuple[int, int, int]:
    patch = r.list("patch_size")
    if len(patch) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in patch) \
            or patch[1] != patch[2]:
        raise r.error("AK505", "patch_size", "patch_size must be [t, h, w] with h == w, each >= 1",
                      expected="[1, 2, 2]", actual=patch)
    return patch[0], patch[1], patch[2]


def _flux(r: ConfigReader):
    heads, dim = _heads(r)
    joint = r.int("num_layers", maximum=MAX_LAYERS)
    single = r.int("num_single_layers", maximum=MAX_LAYERS)
    layers = [_self(i, heads, dim) for i in range(joint + single)]
    return layers, [f"layers 0-{joint - 1}: dual-stream blocks, joint attention over the text and image "
                    f"tokens in one sequence; layers {joint}-{joint + single - 1}: single-stream blocks "
                    "over the same concatenated sequence"]


def _joint_image_tokens(r: ConfigReader, vae: VaeScale, used: dict[str, int], p: int, what: str):
    h, w = used["height"] // (vae.spatial * p), used["width"] // (vae.spatial * p)
    image = h * w
    _some(r, image, used)
    text = used["text_tokens"]
    return image + text, None, (f"height {used['height']} // ({vae.spatial} x {p}) x width {used['width']} // "
                                f"({vae.spatial} x {p}) = {h} x {w} = {image} image tokens{what} + {text} text "
                                f"tokens = {image + text} in the joint attention")


def _some(r: ConfigReader, image: int, used: dict[str, int]) -> None:
    if image < 1:
        raise r.error("AK524", None, f"inputs {used} give no image token: the image is smaller than one "
                      "latent patch", expected="at least one latent patch", actual=used)


def _packed_tokens(r, vae, used):
    # the pipeline packs 2x2 latent patches into one token before the transformer
    return _joint_image_tokens(r, vae, used, 2, " (2x2 latent patches packed by the pipeline)")


def _sd3(r: ConfigReader):
    heads, dim = _heads(r)
    n = r.int("num_layers", maximum=MAX_LAYERS)
    dual = r.list("dual_attention_layers", default=[])
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in dual):
        raise r.error("AK505", "dual_attention_layers", f"dual_attention_layers must list block ids in "
                      f"0 .. {n - 1}", expected=f"ids in 0 .. {n - 1}", actual=dual[:20])
    layers = [_self(i, heads, dim) for i in range(n)]
    layers += [_self(n + j, heads, dim) for j, _ in enumerate(sorted(set(dual)))]
    notes = [f"layers 0-{n - 1}: joint attention over the text and image tokens (MMDiT)"]
    if dual:
        notes.append(f"layers {n}-{n + len(set(dual)) - 1}: the second, image-only self-attention of blocks "
                     f"{sorted(set(dual))} (dual_attention_layers, MMDiT-X); planned for the joint length")
    return layers, notes


def _sd3_tokens(r, vae, used):
    return _joint_image_tokens(r, vae, used, r.int("patch_size"), "")


def _hunyuan(r: ConfigReader):
    heads, dim = _heads(r)
    refiner = r.int("num_refiner_layers", minimum=0, maximum=MAX_LAYERS)
    dual = r.int("num_layers", maximum=MAX_LAYERS)
    single = r.int("num_single_layers", maximum=MAX_LAYERS)
    layers = [_self(i, heads, dim) for i in range(refiner + dual + single)]
    return layers, [f"layers 0-{refiner - 1}: the token refiner's self-attention over the text tokens "
                    "(padded text keys masked)" if refiner else "no token refiner",
                    f"layers {refiner}-{refiner + dual + single - 1}: {dual} dual-stream and {single} "
                    "single-stream blocks, joint attention over the video and text tokens (padded text "
                    "keys masked, so each call attends over its real text length)"]


def _hunyuan_tokens(r, vae, used):
    p, pt = r.int("patch_size"), r.int("patch_size_t")
    tokens, formula = _video_tokens(r, vae, used, p, pt, "")
    text = used["text_tokens"]
    return tokens + text, None, formula + f" + {text} text tokens = {tokens + text} in the joint attention"


def _qwen_image(r: ConfigReader):
    heads, dim = _heads(r)
    n = r.int("num_layers", maximum=MAX_LAYERS)
    return [_self(i, heads, dim) for i in range(n)], [
        f"each of the {n} dual-stream blocks: joint attention over the text and image tokens (padded "
        "text keys masked)"]


def _dtype(r: ConfigReader) -> str | None:
    value = r.cfg.get("torch_dtype")
    return dtype_spelled(value) if isinstance(value, str) else None


DENOISERS: dict[str, Denoiser] = {
    "WanTransformer3DModel": Denoiser(_wan, _wan_tokens, {"height": 480, "width": 832, "frames": 81,
                                                          "text_tokens": 512},
                                      ("num_attention_heads", "attention_head_dim", "added_kv_proj_dim",
                                       "cross_attn_norm", "qk_norm", "rope_max_seq_len"), video=True),
    "FluxTransformer2DModel": Denoiser(_flux, _packed_tokens, {"height": 1024, "width": 1024, "text_tokens": 512},
                                       ("num_attention_heads", "attention_head_dim", "joint_attention_dim",
                                        "axes_dims_rope")),
    "SD3Transformer2DModel": Denoiser(_sd3, _sd3_tokens, {"height": 1024, "width": 1024, "text_tokens": 333},
                                      ("num_attention_heads", "attention_head_dim", "joint_attention_dim",
                                       "dual_attention_layers", "qk_norm")),
    "HunyuanVideoTransformer3DModel": Denoiser(_hunyuan, _hunyuan_tokens,
                                               {"height": 720, "width": 1280, "frames": 129, "text_tokens": 256},
                                               ("num_attention_heads", "attention_head_dim", "qk_norm",
                                                "rope_axes_dim"), video=True),
    "QwenImageTransformer2DModel": Denoiser(_qwen_image, _packed_tokens,
                                            {"height": 1024, "width": 1024, "text_tokens": 512},
                                            ("num_attention_heads", "attention_head_dim", "joint_attention_dim",
                                             "axes_dims_rope")),
}
