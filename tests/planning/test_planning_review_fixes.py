"""Regressions from the planner review: every error's example "after" command must itself plan."""
import shlex

import pytest

from attnkit import plan
from attnkit.cli.common import request_from_args
from attnkit.cli.main import build_parser


def replan(command: str, env=None):
    """Plan an ``attnkit plan MODEL --device D ...`` line exactly as the CLI would."""
    args = build_parser().parse_args(shlex.split(command)[1:])
    return plan(args.models[0], args.device[0], request_from_args(args), env=env or {}, label=args.models[0])


def failing(command: str, env=None):
    p = replan(command, env)
    assert not p.ok, command
    return p, p.error


def test_rule_chosen_backend_with_explicit_phase_does_not_crash():
    p, e = failing("attnkit plan qwen2.5-7b-instruct-1m --device h100 "
                   "--prefill-attention-backend dual_chunk --speculative-tokens 3")
    assert e["code"] == "AK120" and any("drop --speculative-tokens" in s for s in e["solutions"])
    assert replan(e["example_fix"]["after"]).ok


# dual_chunk captures CUDA graphs on its Triton path only (sm80+): not on a T4
@pytest.mark.parametrize("flag,code,device", [("--cuda-graph", "AK120", "t4"),
                                              ("--speculative-tokens 4", "AK120", "a100")])
def test_rule_chosen_backend_refusing_a_user_setting_blames_the_setting(flag, code, device):
    p, e = failing(f"attnkit plan qwen2.5-7b-instruct-1m --device {device} {flag}")
    assert e["code"] == code, e["message"]
    assert any(s.startswith(f"drop {flag.split()[0]}") for s in e["solutions"])
    assert replan(e["example_fix"]["after"]).ok


def test_every_failing_explicit_backend_is_replaced_in_the_fix():
    p, e = failing("attnkit plan llama-3.1-8b --device h100 "
                   "--prefill-attention-backend triton_mla --decode-attention-backend triton_mla")
    assert e["code"] == "AK121"
    after = e["example_fix"]["after"]
    assert "triton_mla" not in after and replan(after).ok


def test_dual_chunk_checks_every_explicit_phase():
    p, e = failing("attnkit plan qwen2.5-7b-instruct-1m --device a100 "
                   "--prefill-attention-backend triton --decode-attention-backend sdpa")
    assert e["code"] == "AK302" and "sdpa" in e["message"] and "triton" in e["message"]
    assert replan(e["example_fix"]["after"]).ok


def test_kv_dtype_fix_uses_the_phase_flag():
    p, e = failing("attnkit plan deepseek-v3 --device h100 --prefill-attention-backend sdpa "
                   "--decode-attention-backend triton_mla --kv-cache-dtype fp8_e5m2")
    assert e["code"] == "AK304"
    after = e["example_fix"]["after"]
    assert "--attention-backend" not in after.replace("-attention-backend", "")  # no shared flag added
    assert any("--decode-attention-backend sdpa" in s for s in e["solutions"])
    assert replan(after).ok


def test_all_denied_example_is_the_users_command_without_deny():
    cmd = "attnkit plan llama-3.1-8b --device h100 --deny triton --deny sdpa --deny torch_native"
    p, e = failing(cmd)
    assert e["example_fix"]["before"] == cmd
    assert "--deny" not in e["example_fix"]["after"] and replan(e["example_fix"]["after"]).ok


def test_env_caused_error_says_unset():
    env = {"ATTNKIT_DENY_BACKENDS": "triton,sdpa,torch_native"}
    p, e = failing("attnkit plan llama-3.1-8b --device h100", env)
    fix = e["example_fix"]
    assert fix["before"].startswith("ATTNKIT_DENY_BACKENDS=triton,sdpa,torch_native attnkit plan llama-3.1-8b")
    assert "unset ATTNKIT_DENY_BACKENDS" in fix["after"] and "--cuda-graph" not in fix["before"]


def test_named_backend_with_no_alternative_here_suggests_a_device():
    p, e = failing("attnkit plan llama-3.1-8b --device mps --attention-backend sdpa")
    assert any("--device" in s for s in e["solutions"])
    assert "--device mps" not in e["example_fix"]["after"] and replan(e["example_fix"]["after"]).ok


def test_env_backend_auto_means_unset():
    p = plan("llama-3.1-8b", "h100", env={"ATTNKIT_ATTENTION_BACKEND": "auto"})
    assert p.ok and p.to_dict() == plan("llama-3.1-8b", "h100", env={}).to_dict()
