"""One planning run's state and steps (``Solve``), driven by ``solver.plan``.

Steps: environment overrides, backend names (aliases, typos, other engines' names), rules that
run before the choice (dtype, KV dtype, tensor parallel, dual chunk), the choice per phase
(explicit, hybrid or automatic: the candidates serving EVERY layer, fastest first by the
device profile where one applies, else in priority-table order; where the profile ranks fresh
prefills and extends over a cached prefix differently, a separate extend backend), one page
size every chosen backend accepts, the rules after the choice, then each role's kernel table.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from attnkit.errors import AttnkitError
from attnkit.model.spec import ModelAttention
from attnkit.planning import failures, kernel_table, priorities, requirements
from attnkit.planning.outcome import build_plan
from attnkit.planning.pages import first_sharing_pages
from attnkit.planning.plan import Plan
from attnkit.planning.profile_choice import ProfileChoice
from attnkit.planning.reasons import Reason, check_backend, model_needs
from attnkit.planning.request import BACKEND_FIELDS, PlanRequest
from attnkit.planning.rules import AFTER, BEFORE, PHASE_FIELDS, Fill, config_dtype
from attnkit.planning.speed_cost import flag_args
from attnkit.planning.unserved import unserved_features
from attnkit.planning.verified import unverified_warnings
from attnkit.planning.view import Release, View
from attnkit.registry import names
from attnkit.registry.capabilities import PHASES, BackendDeclaration
from attnkit.registry.kernels import KernelTable

SETTING_FIELDS = ("dtype", "kv_cache_dtype", "page_size", "tp_size", "speculative_tokens",
                  "cuda_graph", "dual_chunk")


class Solve:
    """One planning run's state; ``run`` fills it and returns the Plan."""

    def __init__(self, model: ModelAttention, label: str, platform, request: PlanRequest,
                 registry: dict[str, BackendDeclaration], table):
        self.model, self.label, self.platform, self.registry, self.table = model, label, platform, registry, table
        self.phases = model.phases                  # encoder-only models have no decode phase
        self.request = self.typed = request        # typed: as the user gave it (for "before" commands)
        self.settings: dict[str, Any] = {}
        # phase -> chosen backend; "extend": a separate backend for steps over a cached prefix
        self.backends: dict[str, str | None] = {p: None for p in (*PHASES, "extend")}
        self.explicit: dict[str, str | None] = {p: None for p in PHASES}
        self.chosen_by: dict[str, str] = {}        # phase -> rule name, for rule-chosen backends
        self.releases: dict[str, Release] = {}     # phase -> how to undo that rule's choice
        self.why: dict[str, str] = {}
        self.adjustments: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.alternatives: dict[str, list[str]] = {}
        self._reasons: dict[tuple[str, str], list[Reason]] = {}
        self.needs = self._needs()               # what every layer asks of attention
        self.env_used: dict[str, str] = {}       # ATTNKIT_* variables that changed the request
        self.measured: ProfileChoice | None = None   # the device profile's ranking (set by plan)
        self.cost: dict[str, dict[str, Any]] = {}    # phase -> what --require costs (requirements.cost)
        self.kernels: dict[str, KernelTable] = {}   # role -> the chosen backend's kernel table
        self.kernel_why: dict[str, str] = {}        # role -> which variants run, as measured

    # ---- the steps -------------------------------------------------------------------------
    def run(self, env: Mapping[str, str]) -> Plan:
        error = None
        try:
            self._env(env)
            self._names()
            self.settings = {f: getattr(self.request, f) for f in SETTING_FIELDS}
            self.settings["tp_size"] = self.request.tp_size or 1
            self.settings["speculative_tokens"] = self.request.speculative_tokens or 0
            self.settings["cuda_graph"] = self.request.cuda_graph   # None: rules.cuda_graph_rule decides
            self._apply(BEFORE)
            self._choose()
            self._apply(AFTER)
            self.warnings += unverified_warnings(self.registry, self.backends.values(), self.platform)
            self._kernels()
        except AttnkitError as err:
            error = err
        result = build_plan(self.view(), error, table=self.table, adjustments=self.adjustments,
                            warnings=self.warnings, alternatives=self.alternatives, kernels=self.kernels,
                            kernel_why=self.kernel_why)
        if result.ok and self.request.require:
            result.requirements = {"require": list(self.request.require), "cost": self.cost}
            result.run = dataclasses.replace(result.run, numerics=self.request.require)
        return result

    def view(self) -> View:
        """A read-only snapshot of this run, for rules and failure builders."""
        ro = lambda d: MappingProxyType(dict(d))  # noqa: E731
        return View(self.model, self.label, self.platform, self.request, self.typed,
                    MappingProxyType(self.registry), ro(self.settings), ro(self.backends), ro(self.explicit),
                    ro(self.chosen_by), ro(self.releases), ro(self.why), tuple(self.phases), self.needs,
                    ro(self.env_used), self.command, self.reasons, self.pool, self.entry, self.page_gain)

    def _env(self, env: Mapping[str, str]) -> None:
        name = (env.get("ATTNKIT_ATTENTION_BACKEND") or "").strip()
        if name.lower() == "auto":        # as on the command line: auto means "let attnkit choose"
            name = ""
        if name:
            if any(self.request.is_set(f) for f in BACKEND_FIELDS):
                self.warnings.append(f"ATTNKIT_ATTENTION_BACKEND={name} ignored: the command line names a backend")
            else:
                self.request = self.request.with_values("env", attention_backend=name)
                self.env_used["ATTNKIT_ATTENTION_BACKEND"] = name
                self._record("attention_backend", None, name, "env", f"ATTNKIT_ATTENTION_BACKEND={name}")
        deny = tuple(n.strip() for n in (env.get("ATTNKIT_DENY_BACKENDS") or "").split(",") if n.strip())
        if deny:
            merged = tuple(dict.fromkeys(self.request.deny + deny))
            self._record("deny", list(self.request.deny), list(merged), "env",
                         f"ATTNKIT_DENY_BACKENDS={','.join(deny)}")
            self.request = self.request.with_values("env", deny=merged)
            self.env_used["ATTNKIT_DENY_BACKENDS"] = ",".join(deny)

    def _names(self) -> None:
        canon: dict[str, Any] = {}
        for f in BACKEND_FIELDS:
            if self.request.is_set(f):
                canon[f] = self._resolve(f, getattr(self.request, f))
        deny = tuple(self._resolve("deny", n) for n in self.request.deny)
        self.request = dataclasses.replace(self.request, **canon, deny=deny)
        both = self.request.attention_backend
        for phase, f in PHASE_FIELDS.items():
            own = getattr(self.request, f)
            if phase not in self.phases:
                if own:
                    self.warnings.append(f"--{f.replace('_', '-')} {own} ignored: {self.model.name} is "
                                         f"encoder-only and has no {phase} phase")
                continue
            if both and own and own != both:
                self.warnings.append(f"--{phase}-attention-backend {own} overrides --attention-backend {both} "
                                     f"for {phase}")
            self.explicit[phase] = own or both
            if self.explicit[phase] in self.request.deny:
                raise failures.denied_but_named(self.view(), phase)

    def _resolve(self, field: str, name: str) -> str:
        try:
            canonical, note = names.resolve(name, self.registry)
        except AttnkitError as err:
            raise failures.bad_name(self.view(), field, name, err) from None
        if note:
            self.warnings.append(note)
        return canonical

    def _apply(self, rules) -> None:
        for rule in rules:
            for item in rule.fn(self.view()):
                if isinstance(item, str):
                    self.warnings.append(item)
                else:
                    self._fill(item, rule.name)

    def _fill(self, o: Fill, rule: str) -> None:
        if o.field.endswith("_backend"):
            phase = o.field.split("_")[0]
            if self.explicit[phase] is not None:
                raise AttnkitError("AK900", f"rule {rule} tried to replace the user's {phase} backend")
            if o.release is None:
                raise AttnkitError("AK900", f"rule {rule} chose the {phase} backend without saying how to undo it")
            old, self.backends[phase] = self.backends[phase], o.to
            self.chosen_by[phase], self.why[phase], self.releases[phase] = rule, o.reason, o.release
        else:
            if o.field in SETTING_FIELDS and self.request.is_set(o.field) and self.settings.get(o.field) != o.to:
                raise AttnkitError("AK900", f"rule {rule} tried to change the user's {o.field}")
            old, self.settings[o.field] = self.settings.get(o.field), o.to
        if old != o.to:
            self._record(o.field, old, o.to, rule, o.reason)

    def _record(self, field: str, old: Any, new: Any, rule: str, reason: str) -> None:
        self.adjustments.append({"field": field, "from": old, "to": new, "rule": rule, "reason": reason})

    def _facts(self, *, require: bool = True) -> dict[str, Any]:
        """kernel_table.model_facts at the current settings (``require``: with --require's numerics)."""
        default = config_dtype(self.model, self.platform)[0]
        return kernel_table.model_facts(self.model, {"dtype": default, **{
            k: v for k, v in self.settings.items() if v is not None}},
            self.request.require if require else ())

    def _allowed(self, facts) -> dict[str, frozenset]:
        """backend -> the kernel variants that can run here (the ranking and the kernel tables
        read the same): a varlen variant counts where it runs some kind of layer (self / cross)."""
        allowed = kernel_table.allowed_variants(self.registry, self.platform, facts)
        if kernel_table.runs_varlen(self.model):
            allowed = kernel_table.with_varlen_kinds(allowed, self.registry, self.platform, self.model, facts)
        return allowed

    def _kernels(self) -> None:
        """Each role's kernel table for its chosen backend, at the final settings, and a line
        for the role's reason naming the variants and their measured rates."""
        facts = self._facts()
        settings = {"dtype": facts["dtype"], **{k: v for k, v in self.settings.items() if v is not None}}
        self.kernels, self.kernel_why = kernel_table.role_tables(
            self.measured.profile if self.measured is not None else None, self.registry, self.backends,
            self.model, platform=self.platform, settings=settings, allowed=self._allowed(facts),
            free=self._facts(require=False), require=self.request.require)

    def _choose(self) -> None:
        """Fixed phases (named or rule-chosen) must serve; open phases walk the priority table."""
        if self.measured is not None:
            self.measured.allowed = self._allowed(self._facts())
        unserved = [f for f in self.needs.features
                    if not any(f in d.capabilities.features for d in self.registry.values())]
        if unserved:
            raise unserved_features(self.view(), unserved)
        if "decode" not in self.phases:
            self.why["decode"] = (f"{self.model.name} is encoder-only: every layer attends both ways over "
                                  "the whole input, so there is no decode phase and no decode backend"
                                  if not self.model.encode_only else
                                  f"{self.model.name} runs once over its whole input (an encoder component "
                                  "of a pipeline): nothing is decoded, so there is no decode backend")
        fixed = {p: self.backends[p] or self.explicit[p] for p in self.phases}
        failing: dict[str, list[str]] = {}
        reasons: list[Reason] = []
        for name in dict.fromkeys(n for n in fixed.values() if n):   # check them all: one fix for all
            phases = [p for p in self.phases if fixed[p] == name]
            found = [r for p in phases for r in self.reasons(p, name)]
            if found:
                failing[name] = phases
                reasons += found
        if failing:
            raise failures.fixed_backends_fail(self.view(), failing, reasons)
        options: dict[str, list[str]] = {}
        split = None
        for phase in self.phases:
            if fixed[phase]:
                options[phase] = [fixed[phase]]
                continue
            pool = self.pool(phase)
            options[phase] = [n for n in pool if not self.reasons(phase, n)]
            if not options[phase]:
                if any(r.code == "AK312" for n in pool for r in self.reasons(phase, n)):
                    raise requirements.unmet(self.view(), phase, pool)
                raise failures.nothing_serves(self.view(), phase, pool)
            if self.measured is not None:
                if phase == "prefill":
                    split = self.measured.split(options[phase], self.model, self.settings)
                options[phase] = self.measured.order(phase, options[phase], self.model, self.settings)
        orders, names = options, None
        if split:
            orders = {**options, "prefill": split[0], "extend": split[1]}
            names = self._split_names(orders)
        if names is None:
            orders, names = options, self._names_for(list(self.phases), options)
        for role, name in names.items():
            phase = "prefill" if role == "extend" else role
            self.alternatives[role] = [n for n in orders[role] if n != name]
            if fixed[phase]:
                self.backends[phase] = name
                if self.measured is not None:
                    self.warnings += self.measured.named_warnings(phase, name, self.model, self.settings)
                if phase not in self.why:
                    field = self.request.backend_field(phase)
                    self.why[phase] = ("named by ATTNKIT_ATTENTION_BACKEND" if self.request.sources.get(field) == "env"
                                       else f"named by --{field.replace('_', '-')}")
                continue
            entry, pool = self.entry(phase), self.pool(phase)
            self.backends[role] = name
            measured_why = self.measured.why(role, name) if self.measured is not None else None
            if measured_why:
                self.why[role] = measured_why
                self._record(f"{role}_backend", None, name, "profile", self.measured.summary(role, name))
                continue
            evidence = (self.measured.evidence(phase, options[phase], self.model, self.settings)
                        if self.measured is not None else "")
            skipped = [n for n in pool[:pool.index(name)] if self.reasons(phase, n)]
            why, summary = priorities.choice_text(entry, self.platform.kind, self.model.kind,
                                                  registered=self.registry, skipped=skipped)
            self.why[phase] = why + evidence
            self._record(f"{phase}_backend", None, name, "priority", summary)
        if self.request.require:
            self._price(names)

    def _price(self, names: dict[str, str]) -> None:
        """What the requirement costs each phase: the chosen backend against the one chosen
        without it (the first that fails nothing but the requirement), by the profile."""
        for phase in self.phases:
            chosen = names.get(phase) or self.backends.get(phase)
            candidates = [n for n in self.pool(phase) if all(r.code == "AK312" for r in self.reasons(phase, n))]
            serving = [n for n in self.pool(phase) if n != chosen and not self.reasons(phase, n)]
            self.cost[phase], line, warnings = requirements.price(
                self.measured, phase, chosen, self.registry, self.platform, self.model, self.settings,
                facts=(self._facts(), self._facts(require=False)), candidates=candidates, serving=serving,
                planner_pick=not (self.explicit.get(phase) or phase in self.chosen_by),
                require=self.request.require)
            self.why[phase] = f"{self.why.get(phase, '')} {line}".strip()
            self.warnings += warnings

    def _names_for(self, roles: list[str], options: dict[str, list[str]]) -> dict[str, str]:
        """One backend per role: the combination earliest in every order whose backends share a
        page size (AK308 when none does)."""
        names = first_sharing_pages(self.registry, self.model, roles, options)
        if names is None:
            raise failures.no_common_layout(self.view(), options)
        return names

    def _split_names(self, orders: dict[str, list[str]]) -> dict[str, str] | None:
        """Backends for fresh prefill, extend and decode steps by their orders, or None when
        the split does not hold (one backend wins both, or a pick is unmeasured)."""
        roles = ["prefill", "extend"] + [p for p in self.phases if p != "prefill"]
        try:
            names = self._names_for(roles, orders)
        except AttnkitError:
            return None                  # no layout for three: the one-prefill-backend solve says why
        return names if self.measured.use_split(names["prefill"], names["extend"]) else None

    # ---- what the view hands rules and failure builders ----------------------------------------------
    def entry(self, phase: str):
        return priorities.lookup(self.platform.kind, self.platform.capability, self.model.kind, phase,
                                 table=self.table, features=self.model.features())

    def page_gain(self, base: int, sizes: list[int]) -> tuple[int, str] | None:
        decode = self.backends.get("decode")
        if self.measured is None or decode is None:
            return None
        return self.measured.page_gain(decode, base, sizes, self.model, self.settings)

    def pool(self, phase: str) -> list[str]:
        """Automatic candidates in priority order: registered, not denied, not explicit-only."""
        entry = self.entry(phase)
        return [n for n in (entry.backends if entry else ()) if n in self.registry
                and not self.registry[n].explicit_only and n not in self.request.deny]

    def reasons(self, phase: str, name: str) -> list[Reason]:
        key = (phase, name)
        if key not in self._reasons:
            default = config_dtype(self.model, self.platform)[0]
            settings = {"dtype": default, **{k: v for k, v in self.settings.items() if v is not None}}
            settings.setdefault("kv_cache_dtype", settings["dtype"])
            settings["page_size"] = self.request.page_size
            found = check_backend(self.registry[name], model=self.model, needs=self.needs,
                                  platform=self.platform, phase=phase, settings=settings)
            found += requirements.reasons(self.registry[name], self.request.require, phase,
                                          platform=self.platform,
                                          facts=kernel_table.model_facts(self.model, settings))
            if name in self.request.deny:
                found.append(Reason("AK307", name, "deny", None, name, "denied by --deny / ATTNKIT_DENY_BACKENDS",
                                    phases=(phase,)))
            self._reasons[key] = found
        return self._reasons[key]

    def _needs(self):
        # Only --dual-chunk off removes the feature; for models without it the flag changes nothing.
        return model_needs(self.model, dual_chunk=self.request.dual_chunk != "off")

    def command(self, **changes: Any) -> str:
        """The ``attnkit plan`` line for this request, with ``changes`` applied (None drops a flag)."""
        values = {k: v for k, v in self.typed.to_dict().items() if self.typed.sources.get(k) != "env"}
        device = changes.pop("device", None) or getattr(self.platform, "preset", None)
        values.update(changes)
        parts = ["attnkit", "plan", self.label] + (["--device", device] if device else [])
        for key, value in values.items():
            parts += flag_args(key, value)
        return " ".join(parts)

