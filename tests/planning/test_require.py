"""``--require batch-invariant`` / ``deterministic``: only backends that declare it, its cost from
the profile file (rates written here, in the test), a coded refusal with fixes when none serves."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import attnkit
from attnkit.errors import AttnkitError
from attnkit.planning.request import parse_request
from attnkit.registry import declarations
from profile_fakes import MHA_H200, entry, only_given_profiles, profile, write  # noqa: F401

BOTH = ("batch_invariant", "deterministic")


def _declaring(name: str) -> list[str]:
    """The backends that declare ``name``, themselves or through a kernel variant."""
    return sorted(n for n, d in declarations().items()
                  if name in d.capabilities.features or any(name in k.numerics for k in d.variants))


@pytest.mark.parametrize("require", [["batch-invariant"], "deterministic", "batch_invariant,deterministic"])
def test_only_backends_that_declare_it_are_chosen(require):
    p = attnkit.plan("llama-3.1-8b", "h200", require=require, profile=False)
    wanted = parse_request(require=require).require
    assert p.ok, p.error
    for role in p.run.roles:     # the backend declares it, or its kernel tables list only variants that do
        decl = declarations()[role.backend]
        if set(wanted) <= decl.capabilities.features:
            continue
        assert role.kernels is not None and role.kernels.variants(), role
        for v in role.kernels.variants():
            assert set(wanted) <= next(k for k in decl.variants if k.name == v).numerics, (role.role, v)
    assert p.run.numerics == wanted and p.to_dict()["run"]["numerics"] == list(wanted)
    assert p.to_dict()["requirements"]["require"] == list(wanted)


def test_cost_quotes_the_profile_files_rates(tmp_path, only_given_profiles):  # noqa: F811
    """The cost is the profile's rate of the chosen backend next to that of the backend planned
    without the requirement: 30 vs 4084 GB/s decode as written in this file."""
    path = write(tmp_path / "h200.json", profile(MHA_H200))
    free = attnkit.plan("llama-3.1-8b", "h200", profile=path)
    p = attnkit.plan("llama-3.1-8b", "h200", profile=path, require="batch-invariant")
    assert p.ok and free.ok
    cost = p.requirements["cost"]["decode"]
    assert (cost["chosen"], cost["unconstrained"]) == ("torch_native", free.decode_backend) == ("torch_native", "triton")
    assert cost["chosen_rate"] == pytest.approx(30) and cost["unconstrained_rate"] == pytest.approx(4084)
    assert cost["ratio"] == pytest.approx(30 / 4084) and cost["unit"] == "GB/s"
    assert "30 vs 4084 GB/s" in p.why["decode"]


def test_cost_is_one_when_the_choice_does_not_change():
    p = attnkit.plan("llama-3.1-8b", "cpu", require="deterministic", profile=False,
                     attention_backend="torch_native")
    assert p.ok and p.requirements["cost"]["decode"]["ratio"] == 1.0


def test_a_named_backend_without_it_is_refused_with_the_reason():
    p = attnkit.plan("llama-3.1-8b", "h200", require="batch-invariant", attention_backend="sdpa",
                     profile=False)
    assert not p.ok and "does not declare batch_invariant" in p.error["message"]
    assert any(r["code"] == "AK312" for r in p.to_dict()["rejected"]["sdpa"])


def test_none_serving_is_ak313_with_a_fix():
    p = attnkit.plan("llama-3.1-8b", "h200", require="batch-invariant",
                     deny=_declaring("batch_invariant"), profile=False)
    assert not p.ok and p.error["code"] == "AK313"
    assert p.error["example_fix"]["after"] == "attnkit plan llama-3.1-8b --device h200 --deny torch_native --deny triton"
    assert any("drop --require batch-invariant" in s for s in p.error["solutions"])
    with pytest.raises(AttnkitError) as err:
        attnkit.plan("llama-3.1-8b", "h200", require="batch-invariant",
                     deny=_declaring("batch_invariant"), profile=False, strict=True)
    assert err.value.code == "AK313"


@pytest.mark.parametrize("bad", ["fast", ["batch-invariant", 3], 7])
def test_junk_is_ak306(bad):
    with pytest.raises(AttnkitError) as err:
        attnkit.plan("llama-3.1-8b", "cpu", require=bad)
    assert err.value.code == "AK306"


def test_cli_flag_plans_and_refuses():
    run = lambda *a: subprocess.run([sys.executable, "-m", "attnkit", "plan", "llama-3.1-8b", "--json", *a],  # noqa: E731
                                    capture_output=True, text=True)
    ok = run("--device", "cpu", "--require", "batch-invariant", "--require", "deterministic")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["requirements"]["require"] == list(BOTH)
    refused = run("--device", "h200", "--require", "batch-invariant", "--deny", "torch_native,triton")
    assert refused.returncode == 3 and json.loads(refused.stdout)["error"]["code"] == "AK313"


def _v(e: dict, variant: str) -> dict:
    return {**e, "variant": variant}


# triton's decode measured for its best variant and for split_fixed (batch invariant), as `attnkit
# tune` writes them; torch_native far slower
VARIANT_ROWS = [
    _v(entry("triton", "decode", 4000, batch=64), "split_merge"),
    _v(entry("triton", "decode", 3600, batch=64), "split"),
    _v(entry("triton", "decode", 2500, batch=64), "split_fixed"),
    entry("torch_native", "decode", 30, batch=64), entry("sdpa", "decode", 952, batch=64),
    _v(entry("triton", "prefill", 600, new=16384, context=16384), "tma"),
    _v(entry("triton", "prefill", 420, new=16384, context=16384), "paged_fixed"),
    entry("sdpa", "prefill", 500, new=16384, context=16384),
    entry("torch_native", "prefill", 18, new=16384, context=16384),
]


def test_triton_serves_with_its_declaring_variants_and_the_cost_is_theirs(tmp_path, only_given_profiles):  # noqa: F811
    path = write(tmp_path / "h200.json", profile(VARIANT_ROWS))
    p = attnkit.plan("llama-3.1-8b", "h200", profile=path, require="batch-invariant")
    assert p.ok and p.decode_backend == "triton"
    decode = p.run.role("decode").kernels
    assert decode.variants() == ("split_fixed",) and [r.order[0].rate for r in decode.rows] == [pytest.approx(2500)]
    cost = p.requirements["cost"]["decode"]
    assert (cost["chosen"], cost["unconstrained"]) == ("triton", "triton")
    assert (cost["chosen_variants"], cost["unconstrained_variants"]) == (["split_fixed"], ["split_merge"])
    assert cost["ratio"] == pytest.approx(2500 / 4000)
    assert "triton (split_fixed) instead of triton (split_merge): 2500 vs 4000 GB/s (0.62x)" in p.why["decode"]
    assert "only variants that declare batch_invariant (--require): not split, split_write, split_merge" \
        in p.kernel_why["decode"]
    assert p.prefill_backend == "triton" and p.run.role("prefill").kernels.variants() == ("paged_fixed",)
    assert "triton (paged_fixed) instead of triton (tma): 420 vs 600 TFLOP/s (0.70x)" in p.why["prefill"]
    free = attnkit.plan("llama-3.1-8b", "h200", profile=path)
    assert "split_fixed" not in [r.order[0].variant for r in free.run.role("decode").kernels.rows]
    unmeasured = attnkit.plan("llama-3.1-8b", "h200", profile=False, require="batch-invariant")
    assert "triton (split_fixed) instead of triton (" in unmeasured.why["decode"]
    assert "cost not measured" in unmeasured.why["decode"]


def test_a_declaring_variant_that_cannot_run_here_does_not_serve(only_given_profiles):  # noqa: F811
    """With split_fixed narrowed to a GPU this is not, triton has no batch-invariant decode here:
    AK312 says which variant and why, and the decode goes to a backend that declares it."""
    import dataclasses

    decls = dict(declarations())
    triton = decls["triton"]
    narrowed = tuple(dataclasses.replace(k, compute_capability=((10, 0), None)) if k.name == "split_fixed" else k
                     for k in triton.variants)
    decls["triton"] = dataclasses.replace(triton, variants=narrowed)
    p = attnkit.plan("llama-3.1-8b", "h200", require="batch-invariant", registry=decls, profile=False)
    assert p.ok and p.decode_backend == "torch_native" and p.prefill_backend == "triton"
    why = [r["message"] for r in p.to_dict()["rejected"]["triton"] if r["code"] == "AK312"]
    assert why and "its decode variant split_fixed does but cannot run here (needs sm100+, not sm90)" in why[0]


def test_a_profile_without_the_declaring_variants_says_so(tmp_path, only_given_profiles):  # noqa: F811
    """A profile written before split_fixed existed: triton is unmeasured under the requirement,
    so the measured torch_native decodes, and a warning names the variants to tune."""
    rows = [e for e in VARIANT_ROWS if e.get("variant") not in ("split_fixed", "paged_fixed")]
    p = attnkit.plan("llama-3.1-8b", "h200", profile=write(tmp_path / "old.json", profile(rows)),
                     require="batch-invariant")
    assert p.ok and p.decode_backend == "torch_native"
    assert any("no decode measurement of triton's split_fixed" in w and "attnkit tune --backends triton" in w
               for w in p.warnings), p.warnings
