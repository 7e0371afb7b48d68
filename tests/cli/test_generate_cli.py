"""``attnkit generate``: token-id and text prompts, the plan it prints, JSON, exit codes."""
import json
import shutil

import pytest

from attnkit.cli import main as cli

ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--page-size", "4",
        "--max-new-tokens", "5", "--ignore-eos"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, initializer_range=0.2)
    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def greedy(model_dir):
    from attnkit.runner import Engine

    engine = Engine.from_pretrained(model_dir, backend="torch_native", page_size=4)
    return lambda prompts: engine.generate(prompts, max_new_tokens=5)


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_prompt_ids_text_output(capsys, model_dir, greedy):
    rc, out, err = run(capsys, "generate", str(model_dir), "--prompt-ids", "1,5,9",
                       "--prompt-ids", "4 6", *ARGS)
    assert rc == 0, err
    assert "planned" in out and "prefill+decode  torch_native" in out and "page_size=4" in out
    assert "rejected" not in out                                 # the short form of the plan
    want = greedy([[1, 5, 9], [4, 6]])
    assert f"[0] 3 prompt tokens -> 5 new (length)\n    ids: {' '.join(map(str, want[0]))}" in out
    assert f"    ids: {' '.join(map(str, want[1]))}" in out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("prefill 5 tok in") and "tok/s) | decode" in last
    assert "2/2 requests" in err                                 # the progress bar


def test_json_output_and_chunked_prefill(capsys, model_dir, greedy):
    rc, out, _ = run(capsys, "generate", str(model_dir), "--prompt-ids", "1,5,9,3,7,8",
                     "--max-batched-tokens", "2", "--json", "--no-progress", *ARGS)
    assert rc == 0
    data = json.loads(out)
    assert data["plan"]["ok"] and data["plan"]["prefill_backend"] == "torch_native"
    assert data["outputs"][0]["token_ids"] == greedy([[1, 5, 9, 3, 7, 8]])[0]
    assert data["outputs"][0]["text"] is None                    # no tokenizer in the directory
    assert data["stats"]["prefill_steps"] == 3 and data["stats"]["decode_tok_s"] > 0


def test_text_prompt_through_the_checkpoint_tokenizer(capsys, model_dir, tmp_path, greedy):
    tokenizers = pytest.importorskip("tokenizers")
    for f in model_dir.iterdir():
        shutil.copy(f, tmp_path / f.name)
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 128)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()        # joins words with spaces
    tok.save(str(tmp_path / "tokenizer.json"))
    rc, out, _ = run(capsys, "generate", str(tmp_path), "--prompt", "w1 w5 w9", "--json", *ARGS)
    assert rc == 0
    got = json.loads(out)["outputs"][0]
    want = greedy([[1, 5, 9]])[0]
    assert got["prompt_token_ids"] == [1, 5, 9] and got["token_ids"] == want
    assert got["text"] == " ".join(f"w{i}" if i else "[UNK]" for i in want)
    rc, out, _ = run(capsys, "generate", str(tmp_path), "--prompt", "w4 w6", *ARGS)
    assert rc == 0 and "    text: 'w" in out


@pytest.mark.parametrize("extra,code,rc", [
    (["--prompt", "hello"], "AK484", 2),                     # no tokenizer files
    (["--prompt-ids", "1,2", "--tp-size", "3"], "AK305", 3),     # 4 heads: the plan's refusal
    (["--prompt-ids", "1,2", "--tp-size", "2", "--cuda-graph", "on"], "AK489", 2),
    (["--prompt-ids", "1,2", "--temperature", "-1"], "AK486", 2),
    (["--prompt-ids", "1,2", "--max-tokens", "8", "--max-new-tokens", "50"], "AK485", 2),
    (["--prompt-ids", "1,200"], "AK483", 2),                 # outside the vocabulary
    (["--prompt-ids", "1,2", "--kv-cache-dtype", "int3"], "AK306", 2),
    (["--prompt-ids", "1,2", "--attention-backend", "triton"], "AK121", 3),   # no plan on CPU
    (["--prompt-ids", "1,2", "--cuda-graph", "on"], "AK489", 2),              # no graphs on CPU
])
def test_errors_and_exit_codes(capsys, model_dir, extra, code, rc):
    got, _, err = run(capsys, "generate", str(model_dir), "--device", "cpu", *extra)
    assert got == rc and f"error {code}" in err


def test_help_lists_no_flag_the_runner_cannot_run(capsys, model_dir):
    """--deny and --speculative-tokens always failed (AK487): generate does not offer them."""
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = capsys.readouterr().out
    assert "--deny" not in text and "--speculative-tokens" not in text and "--attention-backend" in text
    for flag in (["--deny", "sdpa"], ["--speculative-tokens", "2"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["generate", str(model_dir), "--prompt-ids", "1,2", *flag])
        assert e.value.code == 2 and "error AK310" in capsys.readouterr().err


def test_a_plan_preset_as_device_gets_a_pointed_message(capsys, model_dir):
    rc, _, err = run(capsys, "generate", str(model_dir), "--device", "h100", "--prompt-ids", "1,2")
    assert rc == 2 and "error AK483" in err and "device preset of `attnkit plan`" in err
    assert err.count("  fix: ") == 2 and "attnkit plan MODEL_DIR --device h100" in err


def test_engine_errors_offer_only_the_fixes_that_apply(capsys, model_dir):
    """AK483 about the device names the device fix only (not six generic ones); AK486 likewise."""
    rc, _, err = run(capsys, "generate", str(model_dir), "--device", "meta", "--prompt-ids", "1,2")
    assert rc == 2 and "error AK483" in err
    fixes = [line for line in err.splitlines() if line.startswith("  fix: ")]
    assert len(fixes) == 1 and "device" in fixes[0], err
    rc, _, err = run(capsys, "generate", str(model_dir), "--device", "cpu", "--prompt-ids", "1,2", "--top-p", "0")
    fixes = [line for line in err.splitlines() if line.startswith("  fix: ")]
    assert rc == 2 and "error AK486" in err and len(fixes) == 1 and "top_p" in fixes[0], err


def test_bad_prompt_ids_are_a_usage_error(capsys, model_dir):
    for argv in (["--prompt-ids", "1,x"], ["--prompt-ids", "1", "--prompt", "a"], [],
                 ["--prompt-ids", "²"], ["--prompt-ids", "1,-5"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["generate", str(model_dir), *argv])
        assert e.value.code == 2


def test_user_errors_are_coded_not_internal(capsys, model_dir, tmp_path):
    """Each of these was AK900 (an internal error, exit 1) or the wrong code."""
    rc, _, err = run(capsys, "generate", str(model_dir), "--prompt-ids", "1,2", "--device", "cpu",
                     "--seed", str(2 ** 64), "--temperature", "1")
    assert rc == 2 and "error AK486" in err and "Traceback" not in err
    rc, _, err = run(capsys, "generate", str(tmp_path / "nowhere"), "--prompt", "hi")
    assert rc == 2 and "error AK481" in err                  # the directory, not the tokenizer
    for f in model_dir.iterdir():
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "tokenizer.json").write_text("{not json")
    rc, _, err = run(capsys, "generate", str(tmp_path), "--prompt", "hi", "--device", "cpu")
    assert rc == 2 and "error AK484" in err and "tokenizer.json could not be read" in err


def test_tiny_temperature_samples_the_argmax(capsys, model_dir, greedy):
    rc, out, err = run(capsys, "generate", str(model_dir), "--prompt-ids", "1,5,9", "--json",
                       "--temperature", "1e-40", "--seed", "1", *ARGS)
    assert rc == 0, err
    assert json.loads(out)["outputs"][0]["token_ids"] == greedy([[1, 5, 9]])[0]


def test_ctrl_c_exits_quietly(capsys, model_dir, monkeypatch):
    from attnkit.runner.engine.llm import LLM

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(LLM, "generate", interrupted)
    rc, _, err = run(capsys, "generate", str(model_dir), "--prompt-ids", "1,2", *ARGS)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
