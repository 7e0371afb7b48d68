"""The solver's use of device profiles: which applies, how it orders a phase, what the plan says.

``ProfileChoice`` is built once per plan. For a phase the user left open it reorders the
candidates that serve every layer by the profile (planning/measured.py), at the page size the
user fixed or else the default one; the solver keeps
its own rule for the pair (one page size for both phases) and asks here why the chosen
backend won. Without a profile for this device the priority order stands, and its reason
quotes the rates the shipped profile of the same platform kind measured, never a typed
figure. A backend the user named is never reordered or replaced. Once the backends are
chosen, ``page_gain`` tells the page size rule whether the profile measured the decode
backend clearly faster at another page size (planning/page_gain.py).

Prefill steps are two workloads: fresh prefills (no cached prefix) and extends over a cached
prefix (chunked-prefill continuations, prefix-cache hits, MIXED steps). Where the profile
measured both for the model's shape and their fastest backends differ, ``split`` orders the
candidates for each, so the plan may run a separate extend backend.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from attnkit.planning import measured
from attnkit.planning.kernel_table import runs_varlen
from attnkit.planning.page_gain import page_gain
from attnkit.planning.profile_search import find_profile, same_device, shipped_profiles

WORKLOADS = {"prefill": " for prefills without a cached prefix", "extend": " for steps over a cached prefix"}


class ProfileChoice:
    def __init__(self, platform, *, path: str | os.PathLike | None, env: Mapping[str, str],
                 automatic: bool, enabled: bool = True, workload: Any = None):
        """``path``: ``--profile``; ``automatic``: also look in the user's cache and the shipped
        profiles (off for a custom registry, whose backends are not what was timed);
        ``enabled=False``: no profile at all (``plan(..., profile=False)``)."""
        self.platform = platform
        self.workload = measured.check_workload(workload)
        self.profile, self.warnings = (find_profile(platform, path=path, env=env, automatic=automatic)
                                       if enabled else (None, []))
        self.automatic = automatic and enabled
        self.rankings: dict[str, measured.Ranking] = {}       # phase, or "extend" -> its ranking
        self._split: dict[str, measured.Ranking] | None = None
        self._notes: dict[str, list[str]] = {}                 # phase -> the warnings its order() added
        self.allowed: measured.Allowed = None                  # backend -> kernel variants that can run

    def info(self) -> dict[str, Any] | None:
        if self.profile is None:
            return None
        return {**self.profile.info(), "phases": [p for p, r in self.rankings.items() if r.measured]}

    def order(self, phase: str, candidates: list[str], model, settings) -> list[str]:
        """``candidates`` (priority order) in the profile's order for ``phase``."""
        shape = measured.model_shape(model, settings)
        if self.profile is None or shape is None:
            return candidates
        ranking = None
        if phase == "prefill" and runs_varlen(model):   # what runs is the varlen call: its buckets
            ranking = measured.rank(self.profile, shape, "varlen", candidates, self.workload.get(phase),
                                    allowed=self.allowed)
        if ranking is None or not ranking.measured:
            ranking = measured.rank(self.profile, shape, phase, candidates, self.workload.get(phase),
                                    page_size=settings.get("page_size"), allowed=self.allowed)
        notes = [] if ranking is None else ranking.failure_warnings()
        if ranking is not None:
            self.rankings[phase] = ranking
        if ranking is None or not ranking.measured:
            notes.append(f"{self.profile.name} has no {phase} measurement of {', '.join(candidates)} "
                         f"for {shape.label()}: the priority order applies")
        self._notes[phase] = notes
        self.warnings += notes
        return candidates if ranking is None or not ranking.measured else ranking.order

    def split(self, candidates: list[str], model, settings) -> tuple[list[str], list[str]] | None:
        """Orders of ``candidates`` (priority order, each serving prefill) for fresh prefill and
        for extend steps, when the profile ranks the two workloads' fastest differently; else
        None (one backend for all prefill steps). A prefill workload names one step, and a model
        without a decode phase (an encoder) has no step over a cached prefix: no split."""
        shape = measured.model_shape(model, settings)
        if self.profile is None or shape is None or "prefill" in self.workload or "decode" not in model.phases:
            return None
        fresh, extend = (measured.rank(self.profile, shape, "prefill", candidates, role=r,
                                       page_size=settings.get("page_size"), allowed=self.allowed) for r in ("prefill", "extend"))
        if not (fresh and extend and fresh.measured and extend.measured) or fresh.measured[0] == extend.measured[0]:
            return None
        self._split = {"prefill": fresh, "extend": extend}
        return fresh.order, extend.order

    def use_split(self, prefill: str, extend: str) -> bool:
        """Adopt the split for these picks when both were measured for their workload (and differ);
        its two rankings' warnings replace those of the ranking over all prefill buckets."""
        split = self._split
        if not split or prefill == extend or prefill not in split["prefill"].rates \
                or extend not in split["extend"].rates:
            return False
        self.rankings.update(split)
        stale = self._notes.pop("prefill", [])
        self.warnings = [w for w in self.warnings if w not in stale]
        self.warnings += [w for r in split.values() for w in r.failure_warnings() if w not in self.warnings]
        return True

    def why(self, phase: str, chosen: str) -> str | None:
        """The measured reason ``chosen`` won ``phase``, or None when the profile did not decide."""
        ranking = self.rankings.get(phase)
        if ranking is None or chosen not in ranking.rates:
            return None
        return ranking.why(chosen, self.platform)

    def summary(self, phase: str, chosen: str) -> str:
        """One line for the plan's adjustments: what ranked ``chosen`` first."""
        ranking = self.rankings[phase]
        other = "" if same_device(ranking.profile, self.platform) else \
            f" (measured on {ranking.profile.device.get('name')}, not on {self.platform.name})"
        return (f"{ranking.profile.name}{other} ranks {', '.join(ranking.measured)} (fastest first)"
                + WORKLOADS.get(ranking.role or "", ""))

    def evidence(self, phase: str, backends: list[str], model, settings) -> str:
        """For a priority-table choice: the newest shipped profile's rates of ``backends`` (same
        platform kind, another device), or "" where none measured them."""
        shape = measured.model_shape(model, settings)
        if not self.automatic or self.profile is not None or shape is None:
            return ""
        for prof in shipped_profiles(self.platform.kind):
            ranking = measured.rank(prof, shape, phase, backends, self.workload.get(phase),
                                    page_size=settings.get("page_size"), allowed=self.allowed)
            if ranking is not None and ranking.measured:
                return " " + ranking.evidence(self.platform)
        return ""

    def named_warnings(self, phase: str, name: str, model, settings) -> list[str]:
        """What the profile recorded against a backend the user named (it still runs)."""
        shape = measured.model_shape(model, settings)
        if self.profile is None or shape is None:
            return []
        ranking = measured.rank(self.profile, shape, phase, [name], self.workload.get(phase),
                                page_size=settings.get("page_size"), allowed=self.allowed)
        return [] if ranking is None else ranking.failure_warnings("; named, so it runs anyway")

    def page_gain(self, decode: str, base: int, sizes: list[int], model, settings) -> tuple[int, str] | None:
        """A page size of ``sizes`` at which the profile measured the decode backend clearly
        faster than at ``base`` (planning/page_gain.py), and the reason quoting both rates; None
        also when the profile, ranked at that size, would put another decode backend first."""
        shape = measured.model_shape(model, settings)
        if self.profile is None or shape is None:
            return None
        gain = page_gain(self.profile, shape, decode, base, sizes, self.workload.get("decode"),
                         allowed=self.allowed)
        if gain is None:
            return None
        ranked = self.rankings.get("decode")
        if ranked is not None and ranked.measured:
            # the plan must be its own fixed point: ranked at the size it fills, the decode
            # choice must stay (else `plan --page-size N` would pick another backend)
            again = measured.rank(self.profile, shape, "decode", ranked.order,
                                  self.workload.get("decode"), page_size=gain.size, allowed=self.allowed)
            if again is None or not again.measured or again.measured[0] != decode:
                return None
        return gain.size, gain.reason(self.platform)
