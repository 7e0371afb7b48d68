"""Device profiles: the reader (schema checks with coded errors), device matching, where plans find them."""
import json

import pytest
from profile_fakes import H200, MHA_H200, profile, write

from attnkit.errors import AttnkitError
from attnkit.hardware import Platform, get_preset
from attnkit.planning import profile_search as prof
from attnkit.planning.profile import load_profile, parse_profile
from attnkit.planning.profile_search import covers, find_profile


def test_a_profile_round_trips_through_its_json():
    p = parse_profile(profile(MHA_H200))
    again = parse_profile(json.loads(json.dumps(p.to_dict())))
    assert again.entries == p.entries and again.device == H200 and len(p.entries) == 6
    e = p.entries[0]
    assert (e.backend, e.bucket.phase, e.bucket.label(), e.unit) == ("triton", "prefill", "new=16384 prefix=0", "TFLOP/s")
    assert e.rate("graph") == pytest.approx(470) and e.rate("eager") == pytest.approx(470 / 1.5)


def _broken(mutate):
    data = profile(MHA_H200)
    mutate(data)
    return data


MALFORMED = {
    "schema": (lambda d: d.update(schema="other"), "schema"),
    "version": (lambda d: d.update(version=2), "version"),
    "device": (lambda d: d.update(device="h200"), "device"),
    "capability": (lambda d: d["device"].update(capability=[9]), "device.capability"),
    "date": (lambda d: d.pop("date"), "date"),
    "entries": (lambda d: d.update(entries={}), "entries"),
    "batch": (lambda d: d["entries"][0]["bucket"].update(batch=0), "entries[0].bucket.batch"),
    "bool-batch": (lambda d: d["entries"][1]["bucket"].update(batch=True), "entries[1].bucket.batch"),
    "kv_dtype": (lambda d: d["entries"][2]["bucket"].update(kv_dtype="fp7"), "entries[2].bucket.kv_dtype"),
    "phase": (lambda d: d["entries"][0]["bucket"].update(phase="verify"), "entries[0].bucket.phase"),
    "status": (lambda d: d["entries"][3].update(status="fast"), "entries[3].status"),
    "ok-untimed": (lambda d: d["entries"][3].update(graph_ms=None, eager_ms=None), "entries[3]"),
    "work": (lambda d: d["entries"][4].update(work=-1), "entries[4].work"),
    "nan-time": (lambda d: d["entries"][4].update(graph_ms=float("nan")), "entries[4].graph_ms"),
    "new>context": (lambda d: d["entries"][0]["bucket"].update(new=99999), "entries[0].bucket"),
    "mla-dims": (lambda d: d["entries"][0]["bucket"].update(kind="mla"), "entries[0].bucket"),
    "smoke": (lambda d: d.update(smoke="yes"), "smoke"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_profile_is_ak231_naming_the_field(name, tmp_path):
    mutate, field = MALFORMED[name]
    path = write(tmp_path / "p.json", _broken(mutate))
    with pytest.raises(AttnkitError) as err:
        load_profile(path)
    assert err.value.code == "AK231" and err.value.field == field, err.value.message


def test_unreadable_and_non_json_profiles(tmp_path):
    with pytest.raises(AttnkitError) as err:
        load_profile(tmp_path / "missing.json")
    assert err.value.code == "AK230"
    (tmp_path / "cut.json").write_text('{"schema": "attnkit-profile", ')
    with pytest.raises(AttnkitError) as err:
        load_profile(tmp_path / "cut.json")
    assert err.value.code == "AK231" and "not JSON" in err.value.message


def test_a_profile_covers_the_same_architecture():
    p = parse_profile(profile(MHA_H200))
    assert covers(p, get_preset("h200")) and covers(p, get_preset("h100"))      # both sm90
    assert not covers(p, get_preset("a100")) and not covers(p, get_preset("cpu"))
    cpu = parse_profile(profile([], device={"kind": "cpu", "name": "x86_64 CPU", "capability": None}))
    assert covers(cpu, get_preset("cpu")) and not covers(cpu, get_preset("cpu-arm"))


def test_named_profiles_come_first_and_must_cover_the_device(tmp_path):
    a = write(tmp_path / "a.json", profile(MHA_H200, date="2026-12-01"))
    b = write(tmp_path / "b.json", profile(MHA_H200, date="2026-12-03"))
    h200 = get_preset("h200")
    found, warnings = find_profile(h200, path=a, env={"ATTNKIT_PROFILE": b})
    assert (found.path, found.source, warnings) == (a, "--profile", [])
    found, _ = find_profile(h200, env={"ATTNKIT_PROFILE": b})
    assert (found.path, found.source) == (b, "ATTNKIT_PROFILE")
    found, warnings = find_profile(get_preset("a100"), path=a, env={})
    assert found is None and "not on NVIDIA A100" in warnings[0]


def test_the_cache_is_searched_and_bad_files_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(prof, "SHIPPED_DIR", tmp_path / "shipped")
    cache = tmp_path / "cache"
    cache.mkdir()
    write(cache / "h100.json", profile(MHA_H200, device={**H200, "name": "NVIDIA H100 80GB HBM3"}, date="2026-12-05"))
    write(cache / "h200.json", profile(MHA_H200, date="2026-12-01"))
    write(cache / "smoke.json", profile(MHA_H200, date="2026-12-09", smoke=True))
    (cache / "junk.json").write_text("[]")
    env = {"ATTNKIT_PROFILE_DIR": str(cache)}
    found, warnings = find_profile(get_preset("h200"), env=env)
    assert found.path.endswith("h200.json") and found.source == "cache"   # exact name beats newer
    assert len(warnings) == 1 and "junk.json" in warnings[0] and "AK231" in warnings[0]
    found, _ = find_profile(get_preset("h100"), env=env)
    assert found.path.endswith("h100.json")
    found, _ = find_profile(Platform(kind="cuda", name="NVIDIA GH200", capability=(9, 0)), env=env)
    assert found.path.endswith("h100.json")                               # newest of the sm90 ones
    assert find_profile(get_preset("h200"), env=env, automatic=False) == (None, [])


def test_cache_dir_follows_the_environment(tmp_path):
    assert prof.cache_dir({"ATTNKIT_PROFILE_DIR": "/x"}).as_posix() == "/x"
    assert prof.cache_dir({"XDG_CACHE_HOME": "/c"}).as_posix() == "/c/attnkit/profiles"
    assert prof.cache_dir({"HOME": "/h"}).as_posix() == "/h/.cache/attnkit/profiles"
    assert prof.cache_dir({}) is None


def test_shipped_profiles_parse_and_were_written_by_tune():
    for path in sorted(prof.SHIPPED_DIR.glob("*.json")):
        p = load_profile(path)
        assert not p.smoke and p.header.get("runs"), f"{path}: not written by attnkit tune"
        assert all(r["command"].startswith("attnkit tune") for r in p.header["runs"])


def test_a_named_profile_of_another_platform_kind_says_which_kind(tmp_path):
    """Same device name, other kind: the warning read 'measured on NVIDIA H200 (sm90), not on
    NVIDIA H200', naming no difference."""
    rocm = write(tmp_path / "r.json", profile(MHA_H200, device={**H200, "kind": "rocm"}))
    found, warnings = find_profile(get_preset("h200"), path=rocm, env={})
    assert found is None and "NVIDIA H200 (rocm, sm90), not on NVIDIA H200 (cuda, sm90)" in warnings[0], warnings
