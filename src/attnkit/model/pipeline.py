"""Models of several components: a diffusers pipeline directory, a pipeline preset, a VLM config.

``load_components(source)`` returns a ``Pipeline`` (model/components.py), or None when
``source`` is a model of one part (``load_model`` reads those). A pipeline is
``model_index.json`` (its ``_class_name`` and one ``[library, class]`` per component) plus
each component's ``config.json`` in a folder of its name; a pipeline preset
(``presets/pipelines/<name>.json``) holds the same files as data, keyed by their paths. A VLM is
a ``config.json`` with a ``vision_config`` beside its language model. Every component is built
by its class: denoisers (model/diffusion.py), text encoders (``parse_config``, run once: no
decode), vision towers (model/vision.py), and the parts without attention (VAE, scheduler,
tokenizer). A class attnkit does not know is refused (AK521), never guessed.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from attnkit.errors import AttnkitError
from attnkit.model._fields import ConfigReader
from attnkit.model.components import Component, Inputs, Pipeline
from attnkit.model.config import parse_config
from attnkit.model.diffusion import DENOISERS, VaeScale, attention_keys, denoiser_attention
from attnkit.model.presets import PIPELINE_DIR, pipeline_names, preset_config, preset_names
from attnkit.model.vision import unknown_class, vision_component

PIPELINES = ("WanPipeline", "WanImageToVideoPipeline", "FluxPipeline", "StableDiffusion3Pipeline",
             "HunyuanVideoPipeline", "QwenImagePipeline", "QwenImageEditPipeline")
TEXT_ENCODERS = ("CLIPTextModel", "CLIPTextModelWithProjection", "T5EncoderModel", "UMT5EncoderModel",
                 "LlamaModel", "Qwen2_5_VLForConditionalGeneration")
IMAGE_ENCODERS = ("CLIPVisionModel", "CLIPVisionModelWithProjection")
# classes without attention, by how their names end: what they are
PLAIN = {"Scheduler": ("scheduler", "a noise scheduler: arithmetic on latents, no attention"),
         "Tokenizer": ("tokenizer", "a tokenizer: no attention"), "TokenizerFast": ("tokenizer", "a tokenizer: no attention"),
         "Processor": ("processor", "an input processor: no attention"),
         "ImageProcessor": ("image_processor", "an image processor: no attention")}
# VAEs: convolutional, except the 2-D AutoencoderKL's one mid-block attention over the latent map,
# which runs in the decoder once per image, not per step; listed, not planned (docs/models.md)
VAES = ("AutoencoderKL", "AutoencoderKLWan", "AutoencoderKLHunyuanVideo", "AutoencoderKLQwenImage")
ATTENTION_WORDS = ("attn", "attention", "window", "sparse", "mask", "causal")


@lru_cache(maxsize=None)
def _preset_text(name: str) -> str:
    return (PIPELINE_DIR / f"{name}.json").read_text(encoding="utf-8")


def load_components(source: Any, *, inputs: Any = None, name: str | None = None) -> Pipeline | None:
    """The components of ``source`` (a pipeline preset name, a pipeline directory, a VLM
    config path, directory or dict), or None for a model of one part."""
    inputs = Inputs.parse(inputs)
    if isinstance(source, Mapping):
        return _vlm(dict(source), inputs, name=name or "model", source="<dict>") if "vision_config" in source \
            else None
    if not isinstance(source, (str, os.PathLike)):
        return None
    text = os.fsdecode(source)
    if text.strip().lower() in pipeline_names():
        key = text.strip().lower()
        files = json.loads(_preset_text(key))
        origin = files.pop("_source", key)
        pipe = _pipeline(files, inputs, name=name or key, source=f"preset {key}")
        return replace(pipe, source=f"preset {key} ({origin})")
    if text.strip().lower() in preset_names():
        key = text.strip().lower()
        cfg = preset_config(key)
        origin = cfg.pop("_source", key)
        return _vlm(cfg, inputs, name=name or key, source=f"preset {key} ({origin})") \
            if "vision_config" in cfg else None
    path = Path(text).expanduser()
    try:
        if (path / "model_index.json").is_file():
            return _pipeline(_DirFiles(path), inputs, name=name or path.resolve().name, source=str(path))
        config = path / "config.json" if path.is_dir() else path
        if config.is_file() and config.suffix == ".json" and config.stat().st_size < 16 << 20:
            cfg = _json(config)
            if isinstance(cfg, dict) and "vision_config" in cfg:
                default = path.resolve().name if path.is_dir() else config.resolve().parent.name
                return _vlm(cfg, inputs, name=name or default, source=str(config))
    except OSError:
        return None    # load_model reports unreadable paths with its own codes
    return None


class _DirFiles:
    """A pipeline directory read as {relative path: parsed JSON}, on demand."""

    def __init__(self, root: Path):
        self.root = root

    def get(self, key: str) -> Any:
        path = self.root / key
        return _json(path) if path.is_file() else None

    def __getitem__(self, key: str) -> Any:
        return self.get(key)


def _json(path: Path) -> Any:
    from attnkit.model.loader import _read_json
    return _read_json(path)


def _pipeline(files, inputs: Inputs, *, name: str, source: str) -> Pipeline:
    index = files.get("model_index.json")
    top = ConfigReader(index, source=f"{source}: model_index.json") if isinstance(index, dict) else None
    if top is None:
        raise AttnkitError("AK502", f"model_index.json of {source} must be a JSON object", field="model_index.json",
                           expected="JSON object", actual=type(index).__name__)
    cls = top.str("_class_name", default="")
    if cls not in PIPELINES:
        raise top.error("AK520", "_class_name", f"pipeline class {cls or '(none)'!r} is not one attnkit knows the "
                        f"components of; it knows {', '.join(PIPELINES)}", expected=list(PIPELINES), actual=cls)
    # lists are components; other values are the pipeline's own settings (Wan2.2's boundary_ratio)
    entries = {k: v for k, v in index.items() if not k.startswith("_") and isinstance(v, list)}
    settings = {k: v for k, v in index.items() if not k.startswith("_") and not isinstance(v, list)}
    vae = _vae_scale(files, entries)
    if inputs.text_tokens is None:     # the denoiser's prompt length is the text encoders' too
        text = [DENOISERS[v[1]].defaults["text_tokens"] for v in entries.values() if len(v) == 2 and v[1] in DENOISERS]
        inputs = Inputs(inputs.height, inputs.width, inputs.frames, text[0]) if text else inputs
    components: list[Component] = []
    for key, spec in entries.items():
        if not (isinstance(spec, list) and len(spec) == 2):
            components.append(Component(key, "", str(spec)[:60], "unknown", error=top.error(
                "AK504", key, f"model_index.json {key!r} must be [library, class], got {str(spec)[:60]}",
                expected="[library, class]", actual=str(spec)[:60])))
            continue
        library, class_name = spec
        if class_name is None:          # an optional component this checkpoint leaves out
            continue
        components += _component(files, key, str(library), str(class_name), vae, inputs, source)
    notes = [f"model_index.json {k} = {str(v)[:40]}: a pipeline setting (which component runs when), "
             "not attention" for k, v in settings.items()]
    notes = tuple(notes + ([] if vae is None else [f"VAE: {vae.how}"]))
    return Pipeline(name=name, class_name=cls, source=source, components=tuple(components), inputs=inputs,
                    notes=notes)


def _component(files, key: str, library: str, cls: str, vae: VaeScale | None, inputs: Inputs,
               source: str) -> list[Component]:
    for suffix, (role, why) in PLAIN.items():
        if cls.endswith(suffix):
            return [Component(key, library, cls, role, plain=why)]
    if cls in VAES:
        return [Component(key, library, cls, "vae", plain="a VAE: convolutional encoder/decoder run once per "
                          "generation outside the denoising loop; attnkit does not plan it")]
    known = DENOISERS.keys() | set(TEXT_ENCODERS) | set(IMAGE_ENCODERS)
    cfg = files.get(f"{key}/config.json")
    where = f"{source}: {key}/config.json"
    if cls not in known:
        r = ConfigReader(cfg if isinstance(cfg, dict) else {}, source=where)
        return [Component(key, library, cls, "unknown", error=unknown_class(r, "_class_name", cls, sorted(known)))]
    if not isinstance(cfg, dict):
        return [Component(key, library, cls, "unknown", error=AttnkitError(
            "AK523", f"{source} lists component {key!r} ({cls}) but has no {key}/config.json to read its "
            "attention from", field=f"{key}/config.json", expected="the component's config.json", actual=None,
            details={"source": source}))]
    r = ConfigReader(cfg, source=where)
    try:
        if cls in DENOISERS:
            _refuse_unknown_keys(r, cls)
            scale = vae or VaeScale(8, 4, "no VAE config in the pipeline; assumed 8x spatial, 4x temporal")
            model, workload = denoiser_attention(cls, r, scale, inputs, name=f"{key}")
            return [Component(key, library, cls, "denoiser", attention=model, workload=workload)]
        if cls == "Qwen2_5_VLForConditionalGeneration":
            return _vlm(cfg, inputs, name=key, source=where, role="text_encoder").components
        role = "image_encoder" if cls in IMAGE_ENCODERS else "text_encoder"
        if role == "image_encoder":
            comp = vision_component(str(cfg.get("model_type", "")), r, inputs, name=key)
            return [Component(key, library, cls, role, attention=comp.attention, error=comp.error,
                              workload=comp.workload)]
        return [_text_encoder(cfg, key, library, cls, inputs, where)]
    except AttnkitError as err:
        return [Component(key, library, cls, "denoiser" if cls in DENOISERS else "text_encoder", error=err)]


def _text_encoder(cfg: dict, key: str, library: str, cls: str, inputs: Inputs, where: str) -> Component:
    model = parse_config(cfg, name=key, source=where)
    return Component(key, library, cls, "text_encoder", attention=replace(model, encode_only=True),
                     workload=text_workload(cfg, inputs))


def text_workload(cfg: dict, inputs: Inputs):
    """A text encoder's tokens: the prompt length, cut to the encoder's position limit (CLIP: 77)."""
    from attnkit.model.components import Workload
    limit = cfg.get("max_position_embeddings")
    want = inputs.text_tokens or 512
    tokens = min(want, limit) if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 else want
    return Workload(tokens=tokens, inputs={"text_tokens": want},
                    formula=f"{want} prompt tokens" + (f", cut to max_position_embeddings {limit}"
                                                       if tokens < want else ""))


def _vlm(cfg: dict, inputs: Inputs, *, name: str, source: str, role: str = "language_model") -> Pipeline:
    top = ConfigReader(cfg, source=source)
    top_type = top.str("model_type", default="").lower()
    arch = (top.list("architectures", default=[]) or [top_type])[0]
    try:
        lm = parse_config(cfg, name=f"{name}" if role == "text_encoder" else "language_model", source=source)
        own = tuple(n for n in lm.notes if not n.startswith("vision_config"))   # the tower is planned here
        lm = replace(lm, encode_only=role == "text_encoder", notes=own + _mrope_note(top))
        first = Component(name if role == "text_encoder" else "language_model", "transformers", str(arch), role,
                          attention=lm, workload=text_workload(cfg, inputs) if role == "text_encoder" else None)
    except AttnkitError as err:
        first = Component(name if role == "text_encoder" else "language_model", "transformers", str(arch), role,
                          error=err)
    vision_name = f"{name}.vision_tower" if role == "text_encoder" else "vision_tower"
    try:
        tower = vision_component(top_type, top.sub("vision_config"), inputs, name=vision_name)
    except AttnkitError as err:
        tower = Component(vision_name, "transformers", "vision_config", "vision_tower", error=err)
    return Pipeline(name=name, class_name=str(arch), source=source, components=(first, tower), inputs=inputs)


def _mrope_note(top: ConfigReader) -> tuple[str, ...]:
    """Qwen2-VL / Qwen2.5-VL rotate q and k by three position ids (time, height, width)."""
    text = top.sub("text_config") if top.has("text_config") else top
    rope = next((text.sub(k) for k in ("rope_scaling", "rope_parameters") if text.has(k)), None)
    if rope is None or "mrope" not in (str(rope.cfg.get("type")), str(rope.cfg.get("rope_type")),
                                       "mrope" if rope.has("mrope_section") else ""):
        return ()
    return (f"{rope.path('mrope_section')} = {rope.cfg.get('mrope_section')}: multimodal rotary positions, "
            "the rotary dims split into time, height and width sections, each rotated by its own position "
            "id; applied to q and k before attention (outside the kernel), causal attention unchanged",)


def _vae_scale(files, entries: dict) -> VaeScale | None:
    for key, spec in entries.items():
        if isinstance(spec, list) and len(spec) == 2 and spec[1] in VAES:
            cfg = files.get(f"{key}/config.json")
            if not isinstance(cfg, dict):
                return None
            r = ConfigReader(cfg, source=f"{key}/config.json")
            if r.has("spatial_compression_ratio"):
                s, t = r.int("spatial_compression_ratio"), r.int("temporal_compression_ratio", default=1)
                return VaeScale(s, t, f"{spec[1]} spatial_compression_ratio {s}, temporal_compression_ratio {t}")
            if r.has("temperal_downsample"):      # (sic) Wan's and Qwen-Image's VAE configs spell it so
                down = r.list("temperal_downsample")
                s, t = 2 ** len(down), 2 ** sum(1 for d in down if d is True)
                return VaeScale(s, t, f"{spec[1]} temperal_downsample {down}: 2^{len(down)} = {s} spatial, "
                                f"2^{sum(1 for d in down if d is True)} = {t} temporal")
            blocks = r.list("block_out_channels")
            s = 2 ** (len(blocks) - 1)
            return VaeScale(s, 1, f"{spec[1]} block_out_channels of {len(blocks)} levels: 2^{len(blocks) - 1} = {s} "
                            "spatial")
    return None


def _refuse_unknown_keys(r: ConfigReader, cls: str) -> None:
    """Model it or refuse it: a denoiser config key that looks like it changes attention (an
    attention processor, a window, a mask, sparsity) and that attnkit does not read is AK522."""
    known = set(attention_keys(cls))
    for key, value in r.cfg.items():
        if key in known or key.startswith("_") or value in (None, False, [], ""):
            continue
        if any(word in key.lower() for word in ATTENTION_WORDS):
            raise r.error("AK522", key, f"{cls} config key {key} = {str(value)[:60]} changes how attention is "
                          "computed (a processor, window, mask or sparsity) and attnkit does not model it",
                          expected=f"only the attention keys attnkit reads for {cls}: {', '.join(sorted(known))}",
                          actual=str(value)[:60], details={"key": key, "class": cls})
