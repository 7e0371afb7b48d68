"""The varlen call's kernel variants in planning: a component that runs as the varlen call (a
DiT denoiser: non-causal, no KV cache) gets a ``varlen`` kernel table from the profile's varlen
buckets, fastest first, with the launch configurations; the plan prints it; a model with a
decode phase gets none; tune times each variant that can run a varlen bucket."""
import pytest

from attnkit import plan
from attnkit.hardware import get_preset
from attnkit.model.pipeline import load_components
from attnkit.planning.components import plan_components
from attnkit.planning.profile import Bucket, Shape
from attnkit.planning.render_components import components_text
from attnkit.registry import declarations
from attnkit.tune.run import role_of, serving, variants_to_time

from profile_fakes import entry, only_given_profiles, profile, write  # noqa: F401

DIT = dict(heads=24, kv_heads=24, head_dim=128)


def _v(e: dict, variant: str) -> dict:
    return {**e, "variant": variant}


ROWS = [   # the flux shape's prefill (the backend ranking) and its varlen buckets
    entry("triton", "prefill", 500, new=4608, context=4608, **DIT), entry("sdpa", "prefill", 450, new=4608, context=4608, **DIT),
    _v(entry("triton", "varlen", 430, new=4608, context=4608, **DIT), "varlen_tile"),
    _v(entry("triton", "varlen", 560, new=4608, context=4608, **DIT), "varlen_gluon"),
    _v(entry("triton", "varlen", 540, new=4608, context=4608, **DIT), "varlen_gluon_persistent"),
    _v(entry("triton", "varlen", 420, new=119056, context=119056, **DIT), "varlen_tile"),
    _v(entry("triton", "varlen", 520, new=119056, context=119056, **DIT), "varlen_gluon"),
    _v(entry("triton", "varlen", 580, new=119056, context=119056, **DIT), "varlen_gluon_persistent"),
]


@pytest.fixture
def flux(tmp_path, only_given_profiles):
    path = write(tmp_path / "p.json", profile(ROWS))
    result = plan_components(load_components("flux.1-dev"), "h200", profile=path)
    return next(c for c in result.components if c.component.role == "denoiser"), result


def test_the_denoiser_plan_names_the_varlen_variants_fastest_first(flux):
    dit, _ = flux
    p = dit.plan
    assert p.ok and p.prefill_backend == "triton"
    table = p.run.role("varlen").kernels
    assert [[k.variant for k in r.order] for r in table.rows] == [
        ["varlen_gluon", "varlen_gluon_persistent", "varlen_tile"],
        ["varlen_gluon_persistent", "varlen_gluon", "varlen_tile"]]
    assert table.candidates(1, 4608, 4608)[0] == "varlen_gluon"          # the nearest bucket's fastest
    assert table.candidates(1, 75600, 75600)[0] == "varlen_gluon_persistent"
    assert table.rows[0].order[0].rate == pytest.approx(560)
    assert table.configs["varlen_gluon"]["K_SLOTS"] == 4                  # configs.py's, the kernel's too
    assert p.run.backend_options("triton")["kernels"]["varlen"] is table
    assert p.to_dict()["run"]["roles"]["varlen"]["kernels"]["rows"][0]["order"][0]["variant"] == "varlen_gluon"


def test_the_component_text_prints_the_varlen_kernels_with_config_and_rate(flux):
    _, result = flux
    text = components_text(result.to_dict())
    line = text[text.index("kernels for varlen calls:"):]
    assert "varlen_gluon [BLOCK_M=128 BLOCK_N=128 K_SLOTS=4 V_SLOTS=2" in line
    assert "in 1 of 2 buckets" in line and "560 TFLOP/s" in line and "580 TFLOP/s" in line


def test_a_model_with_decode_gets_no_varlen_table(tmp_path, only_given_profiles):
    p = plan("llama-3.1-8b", "h200", profile=write(tmp_path / "p.json", profile(ROWS)))
    assert p.ok and p.run.role("varlen") is None and "varlen" not in p.kernel_why


def test_the_gluon_forms_are_left_out_where_they_cannot_run(tmp_path, only_given_profiles):
    result = plan_components(load_components("flux.1-dev"), "h100", {"dtype": "fp32"},
                             profile=write(tmp_path / "p.json", profile(ROWS)))
    dit = next(c for c in result.components if c.component.role == "denoiser")
    table = dit.plan.run.role("varlen").kernels
    assert table.variants() == ("varlen_tile",)
    assert "varlen_gluon (computes in fp16, bf16, not fp32)" in dit.plan.kernel_why["varlen"]


def test_tune_times_each_varlen_variant_that_can_run():
    h200, triton = get_preset("h200"), declarations()["triton"]
    b = Bucket(Shape("mha", 24, 24, 128, 128, "bf16", "bf16"), "varlen", 1, 4608, 4608, 16)
    assert role_of(b) == "varlen"
    assert variants_to_time(b, triton, h200) == ["varlen_gluon", "varlen_gluon_persistent", "varlen_gluon_split",
                                                 "varlen_tile"]
    d80 = Bucket(Shape("mha", 16, 16, 80, 80, "bf16", "bf16"), "varlen", 64, 64, 64, 16)   # a vision tower's
    assert variants_to_time(d80, triton, h200) == ["varlen_tile"]
    names = serving(b, declarations(), h200, None)
    assert "triton" in names and all("varlen" in declarations()[n].capabilities.features for n in names)


def test_wan_plans_triton_and_its_cross_layers_take_the_tile(tmp_path, only_given_profiles):
    wan = dict(heads=40, kv_heads=40, head_dim=128)
    rows = [_v(entry("triton", "varlen", r, new=32760, context=32760, **wan), v)
            for r, v in ((640, "varlen_gluon"), (600, "varlen_gluon_persistent"), (480, "varlen_tile"))]
    result = plan_components(load_components("wan2.1-t2v-14b"), "h200", profile=write(tmp_path / "p.json", profile(rows)))
    dit = next(c for c in result.components if c.component.role == "denoiser").plan
    assert dit.ok and dit.prefill_backend == "triton" and "triton" not in dit.rejected
    table = dit.run.role("varlen").kernels
    assert [k.variant for k in table.rows[0].order] == ["varlen_gluon", "varlen_gluon_persistent", "varlen_tile"]
    why = dit.kernel_why["varlen"]
    assert "cross-attention layers 1, 3, 5" in why
    assert ("varlen_tile (not varlen_gluon, varlen_gluon_persistent, varlen_gluon_split: does not serve "
            "cross_attention)") in why
    assert "not here" not in why                       # the Gluon forms run the self-attention layers
    text = components_text(result.to_dict())
    assert "kernels for varlen calls: varlen_gluon" in text and "cross-attention layers" in text


def test_flux_joint_attention_has_no_cross_layers_to_name(flux):
    dit, _ = flux
    assert "cross-attention layers" not in dit.plan.kernel_why["varlen"]


def test_a_cacheless_component_is_ranked_by_its_varlen_buckets(tmp_path, only_given_profiles):
    """The denoiser runs the varlen call, so its backend is ranked by the varlen buckets (each
    backend's fastest variant that can run it), not by the paged prefill's: here sdpa leads the
    prefill buckets and triton's Gluon variant the varlen ones."""
    rows = [entry("triton", "prefill", 400, new=4608, context=4608, **DIT),
            entry("sdpa", "prefill", 450, new=4608, context=4608, **DIT),
            entry("sdpa", "varlen", 500, new=4608, context=4608, **DIT),
            _v(entry("triton", "varlen", 430, new=4608, context=4608, **DIT), "varlen_tile"),
            _v(entry("triton", "varlen", 560, new=4608, context=4608, **DIT), "varlen_gluon")]
    path = write(tmp_path / "p.json", profile(rows))
    result = plan_components(load_components("flux.1-dev"), "h200", profile=path)
    dit = next(c for c in result.components if c.component.role == "denoiser").plan
    assert dit.ok and dit.prefill_backend == "triton"
    assert dit.why["prefill"].startswith("varlen: triton, 560 vs 500 TFLOP/s (sdpa)"), dit.why["prefill"]


def test_pipeline_components_are_ranked_by_the_shipped_profile():
    """With no --profile and the shipped declarations, components use the device's shipped
    profile like any model (a custom registry was what turned it off for them)."""
    result = plan_components(load_components("wan2.1-t2v-14b"), "h200")
    dit = next(c for c in result.components if c.component.role == "denoiser").plan
    assert dit.ok and dit.to_dict()["profile"] is not None
    assert dit.why["prefill"].startswith("varlen: "), dit.why["prefill"]
    assert "varlen" in dit.run.backend_options(dit.prefill_backend).get("kernels", {}) or dit.prefill_backend != "triton"
