"""What a Gluon launch derives from shapes alone, built once per shape rather than per call.

An eager call of the Gluon kernels (prefill_gluon.py, prefill_gluon_persistent.py) used to
rebuild, every call: three shared-memory layouts (``NVMMASharedLayout.get_default_for``, a
constexpr function called through Triton's JIT machinery), three validated
``TensorDescriptor`` objects, and the device's properties (SM count, compute capability).
None of that depends on the tensors' data, only on their dtype, shape and row stride (and
the base address's 16-byte alignment, checked per call), so it is kept here:

- ``descriptor(x, rows)``: x [T, H, D] (heads dense) as a TMA descriptor over its
  [T, H * D] rows with [rows, D] blocks; ``matrix_descriptor(x, rows, cols)``: a 2-D x in
  [rows, cols] blocks (runner/layers/stream_mm.py). The first call of a (dtype, 2-D shape,
  row stride, block) builds and validates one through Triton (its checks: alignment,
  strides, layout); a later call copies that template and points it at ``x`` (``base``;
  Triton's launcher reads the address from it at launch). A base that is not 16-byte aligned is built afresh (Triton
  checks it) — the callers' readiness checks keep such tensors off this path.
- ``device_facts(device)``: ((major, minor), SM count) of a CUDA device, asked once.

benchmarks/profile_varlen_host.py measures the host time of a call, piece by piece;
tests/backends/test_varlen_host_work.py counts what a repeated call rebuilds.
"""
from __future__ import annotations

import copy
import functools

import torch

_TEMPLATES: dict[tuple, object] = {}      # (dtype, shape, row stride, block) -> unbound descriptor
MAX_TEMPLATES = 1024                      # the oldest dropped past this (many window lengths)


def descriptor(x: torch.Tensor, rows: int):
    """x: [T, H, D] with x.stride(1) == D, x.stride(2) == 1 -> a Gluon TensorDescriptor of
    x's rows ([T, H * D], row stride x.stride(0)) in [rows, D] blocks."""
    T, H, D = x.shape
    return _cached(x, (T, H * D), x.stride(0), (rows, D))


def matrix_descriptor(x: torch.Tensor, rows: int, cols: int):
    """x: [R, C] with a dense last dim -> a Gluon TensorDescriptor of x in [rows, cols]
    blocks (runner/layers/stream_mm.py's W and x)."""
    return _cached(x, tuple(x.shape), x.stride(0), (rows, cols))


def _cached(x: torch.Tensor, shape: tuple, row_stride: int, block: tuple):
    """A descriptor of x viewed as the 2-D ``shape`` (row stride ``row_stride``) in ``block``
    blocks, from the template of its (dtype, shape, stride, block) where one exists."""
    key = (x.dtype, shape, row_stride, block)
    template = _TEMPLATES.get(key)
    if template is None or x.data_ptr() % 16:
        made = _build(x, shape, row_stride, block)
        if x.data_ptr() % 16 == 0:
            template = copy.copy(made)
            template.base = None          # a template keeps no tensor alive
            if len(_TEMPLATES) >= MAX_TEMPLATES:
                _TEMPLATES.pop(next(iter(_TEMPLATES)))
            _TEMPLATES[key] = template
        return made
    if not hasattr(template, "__dict__"):         # a slotted descriptor class: copy it whole
        made = copy.copy(template)
    else:                                         # the template's fields, its checks passed
        made = object.__new__(type(template))
        made.__dict__.update(template.__dict__)
    made.base = x
    return made


def _build(x: torch.Tensor, shape: tuple, row_stride: int, block: tuple):
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    elem = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16
    layout = gl.NVMMASharedLayout.get_default_for(list(block), elem)
    return TensorDescriptor(x, list(shape), [row_stride, 1], list(block), layout)


@functools.lru_cache(maxsize=None)
def _facts(index: int) -> tuple[tuple[int, int], int]:
    props = torch.cuda.get_device_properties(index)
    return (props.major, props.minor), props.multi_processor_count


def device_facts(device: torch.device) -> tuple[tuple[int, int], int]:
    """((major, minor), multiprocessors) of CUDA ``device``, asked of the driver once."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _facts(index)

