"""A declaration's page-size hook (``page_sizes_for``) decides the page sizes the planner picks
and suggests, and a rule that chooses a backend says how to undo the choice (``Release``)."""
import dataclasses

import pytest

from attnkit import plan
from attnkit.errors import AttnkitError
from attnkit.model.spec import DualChunkConfig, LayerAttention, ModelAttention
from attnkit.planning.pages import common_page_sizes
from attnkit.planning.rules import Fill, Rule
from attnkit.planning.solver import Solve
from attnkit.planning.request import parse_request
from attnkit.hardware import get_preset
from attnkit.registry import declarations


def dca_model(chunk_size: int, local_size: int) -> ModelAttention:
    config = DualChunkConfig(chunk_size=chunk_size, local_size=local_size)
    return ModelAttention("dca-toy", "Qwen2ForCausalLM", tuple(
        LayerAttention(layer_id=i, num_heads=4, num_kv_heads=2, head_dim=64, dual_chunk=config)
        for i in range(2)))


def test_dual_chunk_hook_allows_the_divisors_of_the_chunk_length():
    reg = declarations()
    model = dca_model(40, 16)                                   # chunk length 24
    assert common_page_sizes([reg["dual_chunk"]], model) == [1, 2, 4, 8]
    assert common_page_sizes([reg["sdpa"]], model)[:6] == [1, 2, 4, 8, 16, 32]   # no hook: any


@pytest.mark.parametrize("flags", [{}, {"dual_chunk": "off", "attention_backend": "dual_chunk"}])
def test_planned_page_size_divides_the_chunk_length(flags):
    """With --dual-chunk off and dual_chunk named, the page size used to be 16, which does not
    divide a chunk length of 24: the runtime then refuses the plan (AK470)."""
    p = plan(dca_model(40, 16), "cpu", flags, profile=False)
    assert p.ok and p.prefill_backend == "dual_chunk" and 24 % p.settings["page_size"] == 0


def test_page_size_fixes_come_from_the_hook():
    p = plan(dca_model(40, 16), "cpu", {"attention_backend": "dual_chunk", "page_size": 16}, profile=False)
    assert p.error["code"] == "AK303" and p.error["expected"] == [1, 2, 4, 8]
    assert p.error["example_fix"]["after"].endswith("--page-size 8")


def _solve(rule_fn):
    model = dca_model(40, 16)
    solve = Solve(model, "dca-toy", get_preset("cpu"), parse_request({}), dict(declarations()), ())
    solve._apply((Rule("test-rule", rule_fn),))
    return solve


def test_a_rule_that_chooses_a_backend_must_say_how_to_undo_it():
    with pytest.raises(AttnkitError) as err:
        _solve(lambda v: iter([Fill("prefill_backend", "sdpa", "because")]))
    assert err.value.code == "AK900" and "undo" in err.value.message


def test_the_release_of_the_rule_shapes_its_error():
    """The error for a rule-chosen backend that cannot serve is the rule's, not dual chunk's."""
    from attnkit.planning import failures
    from attnkit.planning.view import Release

    release = Release("AK309", "dtype", "bf16", {"dtype": "fp32"}, "use --dtype fp32")
    solve = _solve(lambda v: iter([Fill("prefill_backend", "triton", "because", release)]))
    reasons = solve.reasons("prefill", "triton")
    err = failures.fixed_backends_fail(solve.view(), {"triton": ["prefill"]}, reasons)
    assert (err.code, err.field, err.actual, err.expected) == ("AK309", "dtype", "bf16", ["fp32"])
    assert err.solutions[-1] == "use --dtype fp32" and "--dual-chunk" not in " ".join(err.solutions)
    assert err.details["example_fix"]["after"].endswith("--device h100")      # triton runs there
