"""tkpy runtime: NVRTC compilation, caching, SASS inspection, driver launches.

Importing this package never needs a GPU; only the functions in
:mod:`tkpy.runtime.driver` and :mod:`tkpy.runtime.launching` that load or launch kernels do.
"""

from .cache import cache_dir, cache_enabled, cache_key
from .disasm import find_nvdisasm, module_sass, sass
from .driver import (
    check,
    compute_capability,
    current_stream_handle,
    device_attribute,
    device_context,
    gpu_available,
    max_shared_per_block_optin,
    require_gpu,
    sm_count,
    stream_getter,
)
from .errors import CompileError, DriverError, NoGPUError, SpillWarning, TkpyRuntimeError
from .launching import Launcher, LoadedKernel, launch, load_function, load_kernel, make_launch_config
from .nvrtc import CompiledModule, cached_module, clear_memo, compile_cuda, nvrtc_version
from .params import PARAM_KINDS, ParamBuffer
from .resources import Resources, parse_ptxas_log, warn_on_spills

__all__ = [
    "CompileError",
    "CompiledModule",
    "DriverError",
    "Launcher",
    "LoadedKernel",
    "NoGPUError",
    "PARAM_KINDS",
    "ParamBuffer",
    "Resources",
    "SpillWarning",
    "TkpyRuntimeError",
    "cache_dir",
    "cache_enabled",
    "cache_key",
    "cached_module",
    "check",
    "clear_memo",
    "compile_cuda",
    "compute_capability",
    "current_stream_handle",
    "device_attribute",
    "device_context",
    "find_nvdisasm",
    "gpu_available",
    "launch",
    "load_function",
    "load_kernel",
    "make_launch_config",
    "max_shared_per_block_optin",
    "module_sass",
    "nvrtc_version",
    "parse_ptxas_log",
    "require_gpu",
    "sass",
    "sm_count",
    "stream_getter",
    "warn_on_spills",
]
