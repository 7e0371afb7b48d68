"""The backend interface every attention implementation plugs into.

Per step: ``step = backend.prepare(meta, cache)`` once; then per layer
``out = backend.forward(q, k, v, layer, cache, step)``, which writes the new K/V into the
cache through ``meta.slot_mapping`` and returns ``[T, H_q * D_v]``.

The public ``prepare`` and ``forward`` below are the API: each checks the inputs, then calls
the implementation. ``prepare`` runs, once per step, ``validate_batch`` (the metadata against
the cache, backends/validation.py) and ``check_step`` (the step and the cache against the
backend's declaration, backends/envelope.py), then ``_prepare``. ``forward`` runs, per layer,
``validate_layer`` (the spec and the cache's buffers for it, once per spec), ``check_layer``
(the layer against the declaration, once per spec), ``validate_tensors`` (shapes, dtypes,
devices and head counts of q/k/v and the layer's tensors; no device sync) and
``check_tensors`` (q's dtype against the declaration, the tensors the layer needs), then
``_forward``. A backend states what it serves once, in its declaration
(``declaration`` below); it implements ``_prepare`` / ``_forward`` and checks nothing the
declaration says (its declaration's ``runtime_check`` hook holds what data cannot say).
``validate_inputs = False`` on a class skips the checks (a wrapper whose inner backends check
what they are handed).

Capture contract (CUDA graphs; a backend declaring the ``cuda_graph`` feature implements it):
``step = backend.prepare_static(meta, cache, max_seq_len=S)`` once for a DECODE step whose
metadata tensors are static buffers (backends/static.py ``StaticDecode``); before each replay
the caller refills those buffers in place and calls ``backend.refill_static(step)`` (device
ops only, capturable); ``forward(..., step)`` then makes no host synchronisation and no
shape, grid or branch that depends on the buffers' values. Prefill stays eager.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.step import RuntimeLayer, StepState
from attnkit.registry.capabilities import BackendDeclaration

__all__ = ["AttentionBackend", "RuntimeLayer", "StepState", "check_int_option",
           "check_launch_config", "check_option"]


class AttentionBackend:
    """Base class: the validating API. Subclasses set ``name`` and implement ``_forward``;
    ``_prepare`` may add backend-specific per-step state (split counts, index tensors) in
    ``StepState.prepared``."""

    name: ClassVar[str] = "base"
    validate_inputs: ClassVar[bool] = True
    # What the backend serves (backends/<name>/declaration.py), checked by backends/envelope.py;
    # None: a backend without a declaration (test doubles), checked for shapes only.
    declaration: ClassVar[BackendDeclaration | None] = None

    def prepare(self, meta: BatchMetadata, cache) -> StepState:
        """Check the batch against the cache (once per step), then build the step."""
        if not self.validate_inputs:
            return self._prepare(meta, cache)
        validation, envelope = _checks()
        validation.validate_batch(meta, cache)
        envelope.check_step(self, meta, cache)
        step = self._prepare(meta, cache)
        return (dataclasses.replace(step, validated=True, made_for=self._made_for(cache))
                if isinstance(step, StepState) else step)

    def forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState, *, indexer=None):
        """q: [T, H_q, D]; k: [T, H_kv, D] (MLA: latent [T, L + R]); v: [T, H_kv, D_v] (MLA:
        None). Checks q/k/v and the layer (per layer: no device sync, and nothing ``prepare``
        already checked for the whole step), then writes k/v into ``cache`` for ``layer``
        and returns [T, H_q * D_v]. indexer: a DSA layer's (sparse_topk) indexer inputs,
        ``backends.sparse.IndexerInputs``, and for such layers only (AK448); it reaches
        ``_forward`` as the keyword ``indexer`` of backends that declare sparse_topk."""
        if self.validate_inputs:
            validation, envelope = _checks()
            if not isinstance(step, StepState):
                validation.not_a_step(step)
            made = step.made_for
            if not step.validated or made is None or made[0] is not type(self) or (
                    made[1] is not cache and made[2] != _layout(cache)):
                self._prepare_again(step, cache)
            step.meta.check_unchanged()
            validation.validate_layer(layer, cache)
            envelope.check_layer(self, layer, cache)
            validation.validate_tensors(q, k, v, layer, cache, step.meta)
            envelope.check_tensors(self, layer, q)
            validation.validate_indexer(indexer, layer, cache, step.meta, q)
        if indexer is None:
            return self._forward(q, k, v, layer, cache, step)
        return _nan_where_unscorable(self._forward(q, k, v, layer, cache, step, indexer=indexer), indexer)

    def varlen(self, q, k, v, layer: RuntimeLayer, batch):
        """Dense varlen attention without a KV cache (backends/varlen.py): q: [Tq, H_q, D],
        k: [Tk, H_kv, D], v: [Tk, H_kv, D_v] packed by ``batch`` (``varlen_batch``); every
        query attends, non-causally, to the keys of its own sequence. Nothing is written to a
        cache. Checks the inputs against the layer and the batch, then calls ``_varlen``.
        Returns [Tq, H_q * D_v] in q's dtype (zero rows past the last sequence)."""
        if self.validate_inputs:
            from attnkit.backends.varlen import validate_varlen

            decl = self.declaration
            validate_varlen(q, k, v, layer, batch, backend=self.name,
                            features=decl.capabilities.features if decl is not None else ())
            _checks()[1].check_varlen(self, layer, q)
        return self._varlen(q, k, v, layer, batch)

    def _prepare_again(self, step: StepState, cache) -> None:
        """A step made by hand, by another backend, or for a cache of another layout: its plan
        may index pages this cache lacks, or be another backend's. Check its batch against
        this cache and plan it here, in place (later layers then reuse it). A static step is
        bound to the buffers and cache it was captured with (AK457)."""
        from attnkit.errors import fail

        if step.validated and getattr(step.meta, "_static", False):
            fail("AK457", f"{self.name}: a static (CUDA-graph) step runs with the backend and cache "
                          "prepare_static made it for, not another", field="step",
                 expected="the cache of prepare_static", actual="another backend or cache layout")
        fresh = self.prepare(step.meta, cache)
        step.prepared, step.validated, step.made_for = fresh.prepared, True, fresh.made_for

    def _made_for(self, cache) -> tuple:
        """What a prepared step depends on besides its metadata: this backend's class and the
        cache's layout (validate_batch checks the tables against its pages and page size). The
        cache itself too, so that ``forward`` with that cache compares identities only."""
        return (type(self), cache, _layout(cache))

    # ---- what a backend implements --------------------------------------------------------
    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        return StepState(meta=meta)

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        raise NotImplementedError

    def _varlen(self, q, k, v, layer: RuntimeLayer, batch):
        """Backends declaring the ``varlen`` feature implement this (inputs already checked)."""
        raise NotImplementedError

    # ---- the capture contract (CUDA graphs) ---------------------------------------------
    def prepare_static(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """The StepState of a static DECODE step: ``meta``'s tensors are buffers the caller
        refills in place (``StaticDecode``) with up to ``meta.num_reqs`` requests of at most
        ``max_seq_len`` keys each; every later ``forward`` with this state reads them as they
        are then. Checks the step (AK457: not DECODE, not static tensors, max_seq_len out of
        reach; the batch checks of ``prepare``), then asks the backend (``capture_plan``)."""
        from attnkit.backends.static import check_static

        check_static(meta, cache, max_seq_len=max_seq_len, backend=self.name)
        _checks()[1].check_step(self, meta, cache)
        step = self.capture_plan(meta, cache, max_seq_len=max_seq_len)
        step.validated = True        # check_static ran the batch checks of prepare
        step.made_for = self._made_for(cache)
        return step

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """Backends that can be captured override this: their per-step plan for the static
        ``meta``, sized for ``max_seq_len`` (split counts, scratch), holding no value that a
        refill changes. The default refuses (AK457)."""
        from attnkit.errors import fail

        fail("AK457", f"the {self.name} backend cannot serve a static (CUDA-graph) decode step: "
                      "its per-step work reads host-side lengths or loops over requests",
             field="backend", expected="a backend declaring cuda_graph", actual=self.name)

    def static_reaches(self, batch: int, max_seq_len: int) -> tuple[int, ...]:
        """The KV lengths, ascending, up to which a static decode step of ``batch`` rows runs
        one kernel; the last is ``max_seq_len``. The caller prepares (and captures) one static
        step per reach and runs a step on the smallest reach that holds its longest KV, so a
        backend whose plan picks its kernel by context (a kernel table) runs a short context's
        kernel at short contexts. The default: one kernel for every length."""
        return (max_seq_len,)

    def refill_static(self, step: StepState) -> None:
        """Bring backend-owned static state up to date after the caller refilled
        ``step.meta``'s buffers: device ops only (no host sync, no allocation), so it may be
        captured with the forward. The default has nothing to do (the plan reads meta's
        tensors directly)."""


def _layout(cache) -> tuple:
    """(page size, pages, device, KV dtype): what a step's checks read of a cache."""
    return (getattr(cache, "page_size", None), getattr(cache, "num_pages", None),
            str(getattr(cache, "device", None)), getattr(cache, "dtype", None))


@functools.cache
def _checks():
    """(backends/validation.py, backends/envelope.py), imported on first use (they need torch;
    this module does not)."""
    from attnkit.backends import envelope, validation

    return validation, envelope


def check_option(backend: str, option: str, value, choices) -> None:
    """Refuse a backend constructor option outside ``choices`` (AK407)."""
    if value not in choices:
        from attnkit.errors import fail

        fail("AK407", f"{backend}: {option}={value!r} is not one of {', '.join(map(repr, choices))}",
             field=option, expected=list(choices), actual=value)


def check_int_option(backend: str, option: str, value, *, minimum: int = 1, power_of_two: bool = False,
                     maximum: int | None = None) -> None:
    """Refuse a launch option (a tile size, a warp or split count) that is not None or an int
    >= ``minimum`` (a power of two where the kernel's tl.arange needs one): AK407 when the
    backend is made, not an interpreter or compiler error at the first forward."""
    if value is None:
        return
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum and (
        maximum is None or value <= maximum) and (not power_of_two or value & (value - 1) == 0)
    if not ok:
        from attnkit.errors import fail

        what = f"an int >= {minimum}" + (" and a power of two" if power_of_two else "") + (
            f", <= {maximum}" if maximum is not None else "")
        fail("AK407", f"{backend}: {option}={value!r} is not {what} (or None)", field=option,
             expected=what, actual=repr(value))


def check_launch_config(backend: str, option: str, config) -> dict:
    """A Triton launch override (``{"BLOCK_M": 64, "num_warps": 4, ...}``): a dict whose tile
    sizes and warp counts are powers of two, stage counts >= 1 (AK407). Returns a copy."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        from attnkit.errors import fail

        fail("AK407", f"{backend}: {option} must be a dict of launch settings, got {type(config).__name__}",
             field=option, expected="dict", actual=repr(config)[:80])
    for key, value in config.items():
        if isinstance(key, str) and key.startswith("BLOCK_"):
            check_int_option(backend, f"{option}[{key!r}]", value, power_of_two=True)
        elif key == "num_warps":
            check_int_option(backend, f"{option}[{key!r}]", value, power_of_two=True, maximum=32)
        elif key == "num_stages":
            check_int_option(backend, f"{option}[{key!r}]", value)
    return dict(config)


def check_kernel_tables(backend: str, kernels, declaration) -> dict:
    """The plan's kernel tables for ``backend`` ({role: KernelTable}), each naming only variants
    its declaration has for that role (AK407); a copy the backend may extend."""
    from attnkit.registry.kernels import ROLES, KernelTable

    if kernels is None:
        return {}
    if not isinstance(kernels, dict) or not all(isinstance(t, KernelTable) and r in ROLES
                                                 for r, t in kernels.items()):
        from attnkit.errors import fail
        fail("AK407", f"{backend}: kernels must map roles {', '.join(ROLES)} to KernelTables "
                      "(Plan.run.backend_options)", field="kernels", expected="{role: KernelTable}",
             actual=repr(kernels)[:120])
    for role, table in kernels.items():
        declared = {k.name for k in declaration.variants_for(role)}
        unknown = sorted(set(table.variants()) - declared)
        if unknown:
            from attnkit.errors import fail
            fail("AK407", f"{backend}: the {role} kernel table names {', '.join(unknown)}, which "
                          f"{backend} does not declare for {role} steps", field=f"kernels[{role!r}]",
                 expected=sorted(declared), actual=unknown)
    return dict(kernels)


def _nan_where_unscorable(out, indexer):
    """out [T, H * D_v] with NaN rows where the token's indexer q [T, H_i, D_i] or weights
    [T, H_i] hold a NaN / inf: its scores would be NaN and any selection arbitrary, so the
    row shows it, as dense attention shows a NaN q (docs/dsa.md). Tensor ops, no host sync."""
    import torch

    ok = torch.isfinite(indexer.q).flatten(1).all(dim=1) & torch.isfinite(indexer.weights).all(dim=1)
    return torch.where(ok[:, None], out, torch.full_like(out, float("nan")))
