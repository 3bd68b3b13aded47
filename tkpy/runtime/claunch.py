"""The cheapest launch Python can make: cuLaunchKernelEx called through ctypes with a C launch
configuration built once per (grid, stream).

cuda-bindings' cuLaunchKernelEx converts its Python config object on every call
(about 3.9 us a launch on the H200 host); a ctypes call with four raw pointers
skips that conversion. The struct layouts are those of cuda.h (CUDA 12/13).
"""
from __future__ import annotations

import ctypes
import functools
from typing import Callable, Optional

from .driver import _driver


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _AttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _Dim3)]


class _Attribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttributeValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attribute)), ("numAttrs", ctypes.c_uint)]


@functools.cache
def _launch_fn() -> Optional[Callable]:
    """libcuda's cuLaunchKernelEx as a ctypes function, or None where it cannot be loaded."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuLaunchKernelEx
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def available() -> bool:
    return _launch_fn() is not None


def prepare(function, grid, block, dynamic_smem: int, stream: int, params_address: int,
            cluster=None) -> Callable[[], int]:
    """A zero-argument callable that launches `function` and returns the CUresult as an int.

    The config (and its cluster attribute) is kept alive by the returned partial's arguments.
    """
    cfg = _LaunchConfig(*grid, *block, dynamic_smem, stream, None, 0)
    keep = [cfg]
    if cluster is not None:
        attr = _Attribute()
        attr.id = int(_driver().CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        attr.value.clusterDim = _Dim3(*cluster)
        cfg.attrs = ctypes.pointer(attr)
        cfg.numAttrs = 1
        keep.append(attr)
    handle = int(function)
    launch = functools.partial(_launch_fn(), ctypes.addressof(cfg), handle, params_address, None)
    launch.keepalive = keep  # type: ignore[attr-defined]  # partial objects accept attributes
    return launch
