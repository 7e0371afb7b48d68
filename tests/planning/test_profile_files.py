"""Device profiles that are not what ``attnkit tune`` writes get coded outcomes (AK230 / AK231, a
warning in the cache) instead of AK900, a raw error, a hang, or a rate of "inf"; planning time
grows linearly with a profile's entries; tune checks --out before measuring."""
from __future__ import annotations

import json
import os
import threading

import pytest

import attnkit
from attnkit.errors import AttnkitError
from attnkit.planning import profile as profile_mod
from attnkit.planning.profile import Bucket, load_profile, parse_profile
from profile_fakes import H200, MHA_H200, entry, only_given_profiles, profile, write  # noqa: F401


def _named(path, **kw):
    return attnkit.plan("llama-3.1-8b", "h200", profile=str(path), **kw)


def _code(fn) -> str:
    with pytest.raises(AttnkitError) as err:
        fn()
    return err.value.code


def test_non_utf8_profile_is_ak231(tmp_path, monkeypatch, only_given_profiles):  # noqa: F811
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"schema": "attnkit-profile", "x": "\xff\xfe"}')
    assert _code(lambda: _named(bad)) == "AK231"
    monkeypatch.setenv("ATTNKIT_PROFILE", str(bad))
    assert _code(lambda: attnkit.plan("llama-3.1-8b", "h200")) == "AK231"


def test_fifo_and_devices_are_refused_without_reading(tmp_path, only_given_profiles):  # noqa: F811
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("code", _code(lambda: _named(fifo))),
                              daemon=True)
    worker.start()
    worker.join(20)
    assert result.get("code") == "AK230", "a FIFO profile blocked the plan"
    assert _code(lambda: _named("/dev/zero")) == "AK230"


def test_too_large_is_ak231(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_text(" " * 2048)
    monkeypatch.setattr(profile_mod, "MAX_BYTES", 1024)
    assert _code(lambda: load_profile(big)) == "AK231"


def test_deep_nesting_is_ak231(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert _code(lambda: load_profile(deep)) == "AK231"


def test_version_true_is_refused():
    data = profile(MHA_H200)
    data["version"] = True
    assert _code(lambda: parse_profile(data)) == "AK231"


def test_infinite_rate_is_refused():
    e = entry("triton", "decode", 1000.0)
    e["work"], e["graph_ms"], e["eager_ms"] = 1e300, 1e-10, 1e-10
    assert _code(lambda: parse_profile(profile([e]))) == "AK231"


def test_stray_files_in_the_cache_are_skipped_with_a_warning(tmp_path, monkeypatch, only_given_profiles):  # noqa: F811
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", str(cache))
    write(cache / "good.json", profile(MHA_H200))
    (cache / "dangling.json").symlink_to(tmp_path / "missing.json")
    (cache / "latin1.json").write_bytes(b"\xe9\xe9")
    os.mkfifo(cache / "fifo.json")
    p = attnkit.plan("llama-3.1-8b", "h200")
    assert p.ok and p.profile and p.profile["source"] == "cache"
    skipped = [w for w in p.warnings if w.startswith("skipped cache profile")]
    assert len(skipped) == 3, p.warnings


def test_other_software_is_named(tmp_path, only_given_profiles):  # noqa: F811
    data = profile(MHA_H200)
    data["software"] = {"torch": "1.0.0", "attnkit": "0.0.1"}
    p = _named(write(tmp_path / "old.json", data))
    assert p.ok and any("measured with attnkit 0.0.1" in w and "torch 1.0.0" in w for w in p.warnings), p.warnings


def test_planning_is_linear_in_entries_per_shape(tmp_path, monkeypatch, only_given_profiles):  # noqa: F811
    """Bucket comparisons while planning over n entries of one shape: about n, not n^2 / 2."""
    n = 1500
    entries = [entry("triton", "decode", 1000 + i % 7, batch=1 + i % 97, context=1024 + i) for i in range(n)]
    path = write(tmp_path / "many.json", profile(entries))
    load_profile(path)                                   # parsed outside the count
    calls = {"n": 0}
    original = Bucket.__eq__

    def counting(self, other):
        calls["n"] += 1
        return original(self, other)
    monkeypatch.setattr(Bucket, "__eq__", counting)
    assert _named(path).ok
    assert calls["n"] < 40 * n, f"{calls['n']} bucket comparisons for {n} entries"


def test_tune_out_checked_before_measuring(tmp_path):
    from attnkit.tune.run import check_writable

    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _code(lambda: check_writable(a_file / "p.json")) == "AK230"
    (tmp_path / "p.json.tmp").mkdir()
    assert _code(lambda: check_writable(tmp_path / "p.json")) == "AK230"
    check_writable(tmp_path / "ok" / "p.json")
    assert not (tmp_path / "ok" / "p.json.tmp").exists()
