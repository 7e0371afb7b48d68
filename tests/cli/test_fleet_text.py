"""A text-mode fleet prints every row: an entry that cannot be read is an error cell and an
errors line, not the only output; the legend explains every cell shape it shows."""
from attnkit.cli import main as cli


def run(capsys, *argv):
    rc = cli.main(list(argv))
    return rc, capsys.readouterr().out


def test_one_bad_entry_prints_the_good_rows_and_its_error(capsys):
    rc, out = run(capsys, "plan", "llama-3.1-8b", "/nonexistent", "--device", "h100")
    lines = out.splitlines()
    assert rc == 2
    assert lines[1].split() == ["llama-3.1-8b", "triton", "p16"]
    assert lines[2].split()[:2] == ["/nonexistent", "AK500"]
    assert any(line.startswith("  /nonexistent @ h100: AK500") for line in lines)
    assert any(line.startswith("AKnnn (no plan) =") for line in lines)


def test_the_legend_explains_two_part_cells(capsys):
    rc, out = run(capsys, "plan", "bge-m3", "llama-3.1-8b", "--device", "cpu", "--attention-backend", "sdpa",
                  "--decode-attention-backend", "torch_native")
    assert rc == 0 and "sdpa/torch_native p16" in out and "sdpa/- p16" in out
    assert "a/b = prefill/decode backends" in out and "a/- = prefill only" in out
    assert "a/b/c" not in out


def test_a_single_bad_model_is_still_the_error(capsys):
    rc, out = run(capsys, "plan", "/nonexistent", "--device", "h100")
    assert rc == 2 and out == ""
