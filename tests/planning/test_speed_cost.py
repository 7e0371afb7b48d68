"""A flag that moves a role to a backend the device profile measures >= 1.5x slower says so
(planning/speed_cost.py): a warning naming the flag, both backends and both measured rates;
``attnkit plan --strict`` refuses it with AK314."""
import json
import re

import pytest

import attnkit
from attnkit.cli.main import main
from attnkit.planning import speed_cost


def _rate(why: str, backend: str) -> float:
    """The rate a plan's reason quotes first for ``backend`` ("decode: triton_mla, 392 vs ...")."""
    m = re.match(rf"\w+: {backend}, ([0-9.]+)", why)
    assert m, why
    return float(m.group(1))


@pytest.mark.parametrize("flag", [{"page_size": 128}, {"kv_cache_dtype": "fp8_e5m2"}])
def test_a_flag_that_moves_decode_to_a_slower_backend_warns_with_both_rates(flag):
    base = attnkit.plan("deepseek-v3", "h100")
    costly = attnkit.plan("deepseek-v3", "h100", flag)
    assert base.decode_backend == "triton_mla" and costly.decode_backend == "torch_native"
    [cost] = [c for c in costly.speed_costs if c["role"] == "decode"]
    key, value = next(iter(flag.items()))
    assert cost["flag"] == f"--{key.replace('_', '-')} {value}" and cost["field"] == key
    assert (cost["backend"], cost["instead"]) == ("torch_native", "triton_mla")
    # the rates are the ones each plan's own reason quotes from the profile
    assert round(cost["rate"]) == round(_rate(costly.why["decode"], "torch_native"))
    assert round(cost["instead_rate"]) == round(_rate(base.why["decode"], "triton_mla"))
    assert cost["instead_rate"] >= 1.5 * cost["rate"] and cost["unit"] == "GB/s"
    [text] = [w for w in costly.warnings if w.startswith(cost["flag"])]
    for word in ("torch_native", "triton_mla", f"{round(cost['rate'])} GB/s", f"{round(cost['instead_rate'])} GB/s"):
        assert word in text
    assert costly.to_dict()["speed_costs"] == costly.speed_costs


def test_no_warning_where_the_backend_stays_or_no_profile_applies():
    assert attnkit.plan("deepseek-v3", "h100", page_size=64).speed_costs == []
    assert attnkit.plan("deepseek-v3", "h100", page_size=128, profile=False).speed_costs == []
    assert attnkit.plan("llama-3.1-8b", "cpu", page_size=32).speed_costs == []


def test_the_threshold_is_the_measured_ratio(monkeypatch):
    ratio = attnkit.plan("deepseek-v3", "h100", page_size=128).speed_costs[0]["slowdown"]
    monkeypatch.setattr(speed_cost, "SLOWDOWN", ratio + 0.05)
    assert attnkit.plan("deepseek-v3", "h100", page_size=128).speed_costs == []
    monkeypatch.setattr(speed_cost, "SLOWDOWN", ratio - 0.05)
    assert attnkit.plan("deepseek-v3", "h100", page_size=128).speed_costs


def test_deny_names_the_backend_it_gave_up():
    [cost] = [c for c in attnkit.plan("llama-3.1-8b", "h100", deny=["triton"]).speed_costs
              if c["role"] == "decode"]
    assert cost["flag"] == "--deny triton" and cost["instead"] == "triton"


def test_strict_refuses_with_ak312(capsys):
    assert main(["plan", "deepseek-v3", "--device", "h100", "--page-size", "128", "--strict", "--json"]) == 3
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and d["error"]["code"] == "AK314" and d["speed_costs"]
    assert "--page-size 128" in d["error"]["message"]
    assert main(["plan", "deepseek-v3", "--device", "h100", "--page-size", "64", "--strict"]) == 0
    assert main(["plan", "deepseek-v3", "--device", "h100", "--page-size", "128"]) == 0
    assert "--page-size 128 costs decode speed" in capsys.readouterr().out
