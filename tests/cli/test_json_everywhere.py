"""Every subcommand takes --json and prints exactly one JSON object, for success and for every
failure, with the error's code; `attnkit --version`."""
import json

import pytest

import attnkit
from attnkit.cli import main as cli


def run(capsys, *argv):
    try:
        rc = cli.main(list(argv))
    except SystemExit as exc:        # argparse errors exit 2, as they always have
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("argv, code", [
    (["plan", "nosuch-model"], "AK507"),
    (["backends", "--device", "h10"], "AK200"),
    (["generate", "/nonexistent", "--prompt-ids", "1"], "AK481"),
    (["explain", "AK999"], "AK315"),
    (["models", "--bogus"], "AK310"),
    (["devices", "--bogus"], "AK310"),
    (["tune", "--device", "tpu"], "AK310"),
    (["backends", "--bogus"], "AK310"),
    (["frobnicate"], "AK310"),
])
def test_every_failure_is_one_json_object_with_its_code(capsys, argv, code):
    rc, out, err = run(capsys, *argv, "--json")
    data = json.loads(out)                       # the whole of stdout: exactly one object
    assert rc == 2 and data["ok"] is False and data["error"]["code"] == code, (out, err)
    assert data["error"]["solutions"]
    assert argv[0] == "plan" or f"error {code}" in err    # and the same error, as text, on stderr


@pytest.mark.parametrize("argv, key", [
    (["models"], "models"), (["devices"], "devices"), (["explain", "AK303"], "code"),
    (["backends", "--device", "cpu"], "backends"), (["plan", "llama-3.1-8b", "--device", "cpu"], "settings"),
])
def test_every_listing_has_a_json_form(capsys, argv, key):
    rc, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert rc == 0 and key in data


def test_json_listings_hold_what_the_text_lists(capsys):
    _, text, _ = run(capsys, "models")
    _, out, _ = run(capsys, "models", "--json")
    data = json.loads(out)
    assert [m["name"] for m in data["models"]] + data["pipelines"] == [line.split()[0] for line in text.splitlines()]
    _, out, _ = run(capsys, "devices", "--json")
    devices = {d["preset"]: d for d in json.loads(out)["devices"]}
    assert devices["h100"]["kind"] == "cuda" and devices["h100"]["capability"] == [9, 0]
    _, out, _ = run(capsys, "explain", "AK303", "--json")
    entry = json.loads(out)
    assert entry["code"] == "AK303" and entry["example_before"].startswith("attnkit plan")


def test_explain_suggests_the_codes_a_prefix_begins(capsys):
    rc, _, err = run(capsys, "explain", "AK12")
    assert rc == 2 and "AK120 or AK121 or AK122" in err and "AK512" not in err


def test_version(capsys):
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"attnkit {attnkit.__version__}"


def test_plan_help_points_to_the_preset_lists(capsys):
    rc, out, _ = run(capsys, "plan", "--help")
    assert rc == 0 and "attnkit models" in out and "attnkit devices" in out and "--strict" in out
