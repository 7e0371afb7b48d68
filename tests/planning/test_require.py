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
from profile_fakes import MHA_H200, only_given_profiles, profile, write  # noqa: F401

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
