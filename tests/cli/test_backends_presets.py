"""`attnkit backends` without --device reads this machine; with a preset, the header and the
JSON say the packages are the preset's assumption (issue: `--device cpu` said triton was not
installed where it is)."""
import json

from attnkit.cli import main as cli
from attnkit.hardware import installed_packages


def run(capsys, *argv):
    rc = cli.main(list(argv))
    return rc, capsys.readouterr().out


def test_without_a_device_the_packages_are_this_machines(capsys):
    rc, out = run(capsys, "backends", "--json")
    data = json.loads(out)
    assert rc == 0 and data["packages_source"] == "this machine" and data["platform"]["preset"] is None
    assert data["platform"]["packages"] == dict(sorted(installed_packages().items()))
    rc, out = run(capsys, "backends")
    assert out.splitlines()[1].startswith("packages: installed on this machine")


def test_a_preset_says_its_packages_are_assumed(capsys):
    rc, out = run(capsys, "backends", "--device", "cpu", "--json")
    data = json.loads(out)
    assert data["packages_source"] == "preset" and data["platform"]["preset"] == "cpu"
    triton = next(b for b in data["backends"] if b["name"] == "triton")
    assert any("cpu preset does not assume" in r["message"] for r in triton["why_not"])
    rc, out = run(capsys, "backends", "--device", "cpu")
    assert "what the cpu preset assumes" in out.splitlines()[1] and "not this machine's" in out
