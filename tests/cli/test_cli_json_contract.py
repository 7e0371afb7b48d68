"""`attnkit plan --json` prints a parseable plan object with error.code for every failing
invocation; exit codes as without --json (2 usage, 3 no plan, 1 internal)."""
import json

import pytest

from attnkit.cli import main as cli


def run(capsys, *argv):
    try:
        rc = cli.main(["plan", *argv, "--json"])
    except SystemExit as exc:        # argparse errors exit 2, as they always have
        rc = exc.code
    out = capsys.readouterr().out
    return rc, json.loads(out)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "broken.json").write_text('{"model_type": "llama",}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "missing.json").write_text('{"model_type": "llama", "num_hidden_layers": 2}')
    (tmp_path / "range.json").write_text('{"model_type": "llama", "num_attention_heads": 0, '
                                         '"num_hidden_layers": 2, "hidden_size": 64}')
    return tmp_path


@pytest.mark.parametrize("argv, code, rc", [
    (["nope-model", "--device", "h100"], "AK507", 2),
    (["llama-3.1-8b", "--device", "h1000"], "AK200", 2),
    (["llama-3.1-8b", "--device", "h100", "--page-size", "abc"], "AK306", 2),
    (["llama-3.1-8b", "--device", "h100", "--kv-cache-dtype", "fp7"], "AK306", 2),
    (["llama-3.1-8b", "--device", "h100", "--bogus-flag"], "AK310", 2),
    (["--device", "h100"], "AK310", 2),
    (["llama-3.1-8b", "--device", "h100", "--attention-backend", "tritn"], "AK300", 2),
    (["deepseek-v3.2", "--device", "h100", "--deny", "torch_native,triton_dsa"], "AK120", 3),
    (["gemma-2-9b", "--device", "t4", "--dtype", "bf16"], "AK309", 3),
])
def test_every_failure_prints_a_failed_plan(capsys, argv, code, rc):
    got_rc, data = run(capsys, *argv)
    assert got_rc == rc and data["ok"] is False and data["error"]["code"] == code
    assert data["error"]["solutions"] and data["schema"] == 1
    assert set(data) >= {"model", "model_info", "platform", "request", "prefill_backend", "error"}


@pytest.mark.parametrize("name, code", [("broken.json", "AK501"), ("list.json", "AK502"),
                                        ("missing.json", "AK503"), ("range.json", "AK505"),
                                        ("nowhere/config.json", "AK500")])
def test_unreadable_configs(capsys, files, name, code):
    rc, data = run(capsys, str(files / name), "--device", "h100")
    assert rc == 2 and data["error"]["code"] == code and data["model_info"] is None


def test_several_models_and_devices_keep_the_list_shape(capsys):
    rc, data = run(capsys, "llama-3.1-8b", "nope-model", "--device", "h100", "--device", "cpu")
    assert rc == 2 and [d["ok"] for d in data] == [True, True, False, False]
    assert {d["error"]["code"] for d in data[2:]} == {"AK507"}


def test_internal_errors_are_json_too(capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("kaboom")
    monkeypatch.setattr("attnkit.planning.solver.plan", boom)
    rc, data = run(capsys, "llama-3.1-8b", "--device", "h100")
    assert rc == 1 and data["error"]["code"] == "AK900" and "kaboom" in data["error"]["message"]


def test_without_json_nothing_changes(capsys):
    assert cli.main(["plan", "nope-model", "--device", "h100"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "AK507" in captured.err


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("content, code", [(None, "AK230"), ("{not json", "AK231"), ("[1, 2]", "AK231")])
def test_an_unreadable_profile_exits_the_same_with_and_without_json(capsys, monkeypatch, tmp_path,
                                                                     how, content, code):
    """Text mode exits 2 for an unreadable profile (the command is wrong); --json exited 3."""
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    argv = ["llama-3.1-8b", "--device", "h200"]
    if how == "flag":
        argv += ["--profile", str(path)]
    else:
        monkeypatch.setenv("ATTNKIT_PROFILE", str(path))
    assert cli.main(["plan", *argv]) == 2
    assert f"error {code}" in capsys.readouterr().err
    rc, data = run(capsys, *argv)
    assert (rc, data["error"]["code"]) == (2, code)
