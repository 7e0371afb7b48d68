"""Pipelines and VLMs read into components: which attend, how, over how many tokens."""
import json

import pytest

from attnkit.errors import AttnkitError
from attnkit.model import load_model, parse_config, preset_config
from attnkit.model.pipeline import load_components, pipeline_names


def by_name(pipe):
    return {c.name: c for c in pipe.components}


def video_tokens(frames, height, width, t=4, s=8, p=2):
    # the formula as the Wan / HunyuanVideo papers state it, written out independently
    return ((frames - 1) // t + 1) * (height // s // p) * (width // s // p)


@pytest.mark.parametrize("name,cls,layers,heads,dim,tokens", [
    ("wan2.1-t2v-14b", "WanTransformer3DModel", 80, 40, 128, 21 * 30 * 52),
    ("flux.1-dev", "FluxTransformer2DModel", 57, 24, 128, 64 * 64 + 512),
    ("stable-diffusion-3.5-large", "SD3Transformer2DModel", 38, 38, 64, 64 * 64 + 77 + 256),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", 62, 24, 128, 33 * 45 * 80 + 256),
    ("qwen-image", "QwenImageTransformer2DModel", 60, 24, 128, 64 * 64 + 512),
])
def test_every_denoiser_preset_is_read(name, cls, layers, heads, dim, tokens):
    d = by_name(load_components(name))["transformer"]
    assert (d.class_name, d.role, d.error) == (cls, "denoiser", None)
    assert len(d.attention.layers) == layers
    assert {(l.num_heads, l.head_dim) for l in d.attention.layers} == {(heads, dim)}
    assert all(not l.causal for l in d.attention.layers) and d.attention.phases == ("prefill",)
    assert d.workload.tokens == tokens


def test_wan_720p_is_75600_tokens_with_cross_attention_to_the_text():
    d = by_name(load_components("wan2.1-t2v-14b", inputs={"height": 720, "width": 1280, "frames": 81}))["transformer"]
    assert d.workload.tokens == video_tokens(81, 720, 1280) == 75_600
    roles = [l.role for l in d.attention.layers]
    assert roles.count("encoder") == roles.count("cross") == 40 and d.workload.context == 512


def test_wan22_has_two_denoisers_and_its_boundary_is_a_setting():
    pipe = load_components("wan2.2-t2v-a14b")
    assert [c.name for c in pipe.components if c.role == "denoiser"] == ["transformer", "transformer_2"]
    assert any("boundary_ratio" in n for n in pipe.notes)


def test_parts_without_attention_are_listed_and_t5_is_refused_with_its_code():
    comps = by_name(load_components("flux.1-dev"))
    assert {n for n, c in comps.items() if c.plain} == {"scheduler", "tokenizer", "tokenizer_2", "vae"}
    assert comps["text_encoder_2"].error.code == "AK508"           # T5's relative position bias
    clip = comps["text_encoder"]
    assert clip.attention.layers[0].causal and clip.attention.phases == ("prefill",) and clip.workload.tokens == 77


def test_a_pipeline_directory_reads_as_its_preset(tmp_path):
    from attnkit.model.pipeline import PIPELINE_DIR
    files = json.loads((PIPELINE_DIR / "hunyuanvideo.json").read_text())
    files.pop("_source")
    for rel, cfg in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(json.dumps(cfg))
    disk, preset = load_components(str(tmp_path)), load_components("hunyuanvideo")
    assert [(c.name, c.role, c.workload and c.workload.tokens) for c in disk.components] == \
        [(c.name, c.role, c.workload and c.workload.tokens) for c in preset.components]
    (tmp_path / "transformer" / "config.json").unlink()
    assert by_name(load_components(str(tmp_path)))["transformer"].error.code == "AK523"


def _dir(tmp_path, index, **configs):
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    for key, cfg in configs.items():
        (tmp_path / key).mkdir()
        (tmp_path / key / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def test_unknown_pipeline_and_component_classes_are_refused(tmp_path):
    with pytest.raises(AttnkitError) as err:
        load_components(_dir(tmp_path, {"_class_name": "MysteryPipeline"}))
    assert err.value.code == "AK520" and "FluxPipeline" in err.value.message
    (tmp_path / "model_index.json").write_text(json.dumps(
        {"_class_name": "FluxPipeline", "transformer": ["diffusers", "NewDiT"]}))
    assert by_name(load_components(str(tmp_path)))["transformer"].error.code == "AK521"


def test_an_attention_key_attnkit_does_not_read_is_refused(tmp_path):
    from attnkit.model.pipeline import PIPELINE_DIR
    wan = json.loads((PIPELINE_DIR / "wan2.1-t2v-14b.json").read_text())["transformer/config.json"]
    path = _dir(tmp_path, {"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]},
                transformer={**wan, "attention_type": "sliding_tile"})
    err = by_name(load_components(path))["transformer"].error
    assert err.code == "AK522" and err.field == "attention_type"


def test_qwen25_vl_is_two_components_not_a_text_model():
    """The bug: a Qwen2.5-VL config planned as a 28-layer text model, its tower never named."""
    pipe = load_components("qwen2.5-vl-7b-instruct")
    lm, tower = pipe.components
    assert (lm.role, len(lm.attention.layers), lm.attention.phases) == ("language_model", 28, ("prefill", "decode"))
    assert any("mrope_section" in n for n in lm.attention.notes)
    assert (tower.role, len(tower.attention.layers)) == ("vision_tower", 32)
    assert {l.head_dim for l in tower.attention.layers} == {1280 // 16}
    assert all(not l.causal for l in tower.attention.layers)
    assert tower.workload.sequence == {"full": 74 * 74, "window": 64}       # 1036 / 14 = 74 patches a side
    text_only = load_model("qwen2.5-vl-7b-instruct")                         # plan(): the language model ...
    assert any("vision_config" in n and "component" in n for n in text_only.notes)   # ... saying so


def test_an_unknown_vision_tower_is_refused():
    cfg = {**preset_config("qwen3-8b"), "vision_config": {"model_type": "mystery_vit", "num_hidden_layers": 2}}
    tower = load_components(cfg).components[1]
    assert tower.error.code == "AK521" and "mystery_vit" in tower.error.message


@pytest.mark.parametrize("inputs", [{"height": 0}, {"height": True}, {"depth": 3}, "720p"])
def test_bad_inputs_are_coded(inputs):
    with pytest.raises(AttnkitError) as err:
        load_components("flux.1-dev", inputs=inputs)
    assert err.value.code == "AK524"


def test_an_image_smaller_than_a_patch_is_refused():
    assert by_name(load_components("flux.1-dev", inputs={"height": 8}))["transformer"].error.code == "AK524"


def test_a_plain_model_is_not_a_pipeline():
    assert load_components("llama-3.1-8b") is None and load_components(preset_config("qwen3-8b")) is None


@pytest.mark.parametrize("cls", ["Qwen2_5_VLConfig", "LlavaConfig", "Gemma3Config"])
def test_transformers_vlm_configs_are_read_as_transformers_builds_them(cls):
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, cls)()
    lm, tower = load_components(config.to_dict()).components
    vision, text = config.vision_config, config.get_text_config()
    heads = getattr(vision, "num_heads", None) or vision.num_attention_heads
    layers = getattr(vision, "depth", None) or vision.num_hidden_layers
    assert len(tower.attention.layers) == layers
    assert {(l.num_heads, l.head_dim) for l in tower.attention.layers} == {(heads, vision.hidden_size // heads)}
    assert len(lm.attention.layers) == text.num_hidden_layers and lm.error is None


@pytest.mark.parametrize("name", pipeline_names())
def test_every_pipeline_preset_names_its_source_and_loads(name):
    from attnkit.model.pipeline import PIPELINE_DIR
    files = json.loads((PIPELINE_DIR / f"{name}.json").read_text())
    repo = files["_source"].split(" ")[0]
    assert repo.count("/") == 1 and "model_index.json" in files
    pipe = load_components(name)
    assert repo in pipe.source and any(c.role == "denoiser" and c.attention for c in pipe.components)


def test_frames_for_an_image_model_are_reported_not_dropped():
    dit = by_name(load_components("flux.1-dev", inputs={"frames": 81}))["transformer"]
    assert dit.workload.tokens == 4608 and any("frames = 81 ignored" in n for n in dit.attention.notes)


def test_wan_i2v_has_a_second_cross_attention_and_an_image_encoder(tmp_path):
    from attnkit.model.pipeline import PIPELINE_DIR
    wan = json.loads((PIPELINE_DIR / "wan2.1-t2v-14b.json").read_text())["transformer/config.json"]
    clip = {"model_type": "clip_vision_model", "hidden_size": 1280, "num_attention_heads": 16,
            "num_hidden_layers": 32, "image_size": 224, "patch_size": 14}
    path = _dir(tmp_path, {"_class_name": "WanImageToVideoPipeline",
                           "transformer": ["diffusers", "WanTransformer3DModel"],
                           "image_encoder": ["transformers", "CLIPVisionModel"],
                           "image_processor": ["transformers", "CLIPImageProcessor"]},
                transformer={**wan, "added_kv_proj_dim": 5120, "image_dim": 1280}, image_encoder=clip)
    comps = by_name(load_components(path))
    roles = [l.role for l in comps["transformer"].attention.layers]
    assert roles[:3] == ["encoder", "cross", "cross"] and len(roles) == 120
    enc = comps["image_encoder"]
    assert enc.role == "image_encoder" and enc.workload.tokens == (224 // 14) ** 2 + 1
    assert comps["image_processor"].plain
