"""--cuda-graph on / off / auto: planned from the declarations (cuda_graph is declared only
where tests/conformance/test_capture.py proves it), with provenance for auto's choice."""
import json
import shlex

import pytest

from attnkit import plan
from attnkit.cli.main import build_parser, main, request_from_args
from attnkit.errors import AttnkitError
from attnkit.planning.request import parse_request


def replan(command: str):
    args = build_parser().parse_args(shlex.split(command)[1:])
    return plan(args.models[0], args.device[0], request_from_args(args), env={}, label=args.models[0])


def graph_adjustment(p):
    return next((a for a in p.adjustments if a["field"] == "cuda_graph"), None)


def test_cuda_graph_on_plans_where_both_backends_declare_it():
    p = replan("attnkit plan llama-3.1-8b --device h100 --cuda-graph on")
    assert p.ok and p.decode_backend == "triton" and p.settings["cuda_graph"] is True
    assert graph_adjustment(p) is None                         # the user's setting, not a rule's
    assert {r.code for r in p.rejected["sdpa"]} == {"AK109"}   # sdpa cannot be captured
    mla = replan("attnkit plan deepseek-v3 --device h100 --cuda-graph")    # bare flag = on
    assert mla.ok and mla.decode_backend == "triton_mla" and mla.settings["cuda_graph"] is True


@pytest.mark.parametrize("command,on,why", [
    ("attnkit plan llama-3.1-8b --device h100", True, "triton declares cuda_graph"),
    ("attnkit plan kimi-k2 --device h200", True, "triton_mla declares cuda_graph"),
    ("attnkit plan qwen2.5-7b-instruct-1m --device h100", True, "dual_chunk declares"),
    ("attnkit plan llama-3.1-8b --device cpu", False, "cpu is not a CUDA device"),
    ("attnkit plan llama-3.1-8b --device h100 --attention-backend sdpa", False, "sdpa cannot"),
    ("attnkit plan llama-3.1-8b --device h100 --prefill-attention-backend sdpa "
     "--decode-attention-backend triton", True, "prefill (sdpa) runs eagerly"),
    ("attnkit plan qwen2.5-7b-instruct-1m --device t4", False, "dual_chunk cannot"),
])
def test_auto_turns_graphs_on_only_where_the_decode_backend_captures(command, on, why):
    p = replan(command)
    assert p.ok and p.settings["cuda_graph"] is on
    adj = graph_adjustment(p)
    assert adj["rule"] == "cuda-graph" and adj["from"] is None and adj["to"] is on
    assert why in adj["reason"], adj["reason"]


def test_off_stays_off_and_is_written_back_as_off():
    p = replan("attnkit plan llama-3.1-8b --device h100 --cuda-graph off")
    assert p.ok and p.settings["cuda_graph"] is False and graph_adjustment(p) is None
    bad = replan("attnkit plan llama-3.1-8b --device h100 --cuda-graph off --attention-backend triton_mla")
    assert "--cuda-graph off" in bad.error["example_fix"]["before"]
    assert "--cuda-graph off" in bad.error["example_fix"]["after"]


def test_on_is_refused_where_nothing_captures():
    cpu = replan("attnkit plan llama-3.1-8b --device cpu --cuda-graph on")
    assert not cpu.ok and cpu.error["code"] == "AK311"
    assert replan(cpu.error["example_fix"]["after"]).ok
    named = replan("attnkit plan llama-3.1-8b --device h100 --attention-backend sdpa --cuda-graph on")
    assert named.error["code"] == "AK121" and any(r.code == "AK109" for r in named.rejected["sdpa"])
    t4 = replan("attnkit plan qwen2.5-7b-instruct-1m --device t4 --cuda-graph on")
    assert t4.error["code"] == "AK120"                        # dual_chunk's Triton path needs sm80
    assert "refuses --cuda-graph" in t4.error["message"] and "sm80" in t4.error["message"]


def test_dual_chunk_head_dims_past_its_triton_path_cannot_be_captured():
    from attnkit.model.spec import DualChunkConfig, LayerAttention, ModelAttention

    cfg = DualChunkConfig(chunk_size=64, local_size=8)
    wide = ModelAttention("wide-dca", "Qwen2ForCausalLM", tuple(
        LayerAttention(layer_id=i, num_heads=8, num_kv_heads=2, head_dim=288, dual_chunk=cfg)
        for i in range(2)))
    p = plan(wide, "h100", env={})
    assert p.ok and p.settings["cuda_graph"] is False
    refused = plan(wide, "h100", {"cuda_graph": True}, env={})
    assert not refused.ok and "head rows" in refused.error["message"]


@pytest.mark.parametrize("given,parsed", [("on", True), ("OFF", False), ("auto", None), (True, True),
                                          (False, False), (None, None)])
def test_request_values(given, parsed):
    assert parse_request({"cuda_graph": given}).cuda_graph is parsed


@pytest.mark.parametrize("junk", ["yes", 1, 0.5, ["on"]])
def test_junk_is_ak306(junk):
    with pytest.raises(AttnkitError) as err:
        parse_request({"cuda_graph": junk})
    assert err.value.code == "AK306"


def test_json_reports_the_choice(capsys):
    assert main(["plan", "llama-3.1-8b", "--device", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["cuda_graph"] is True and out["request"]["cuda_graph"] is None
    assert main(["plan", "llama-3.1-8b", "--device", "h100", "--cuda-graph", "off", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["cuda_graph"] is False and out["request"]["cuda_graph"] is False
