"""`kernel.interpret[grid](*args)`: a kernel launch, with the GPU call syntax, run by the CPU interpreter."""
from __future__ import annotations

import functools
import os

from ..frontend.signature import SCALAR_DTYPES, bind_dims, launch_grid
from ..tiles.dtypes import f32
from .machine import Program, run_grid
from .memory import GlobalTensor
from .numerics import to_f32

ENV_VAR = "TKPY_INTERPRET"
ORDER_ENV_VAR = "TKPY_INTERPRET_ORDER"   # the warps' turn order: forward (default), reverse, random:SEED


# os.environ's own mapping of encoded names to encoded values, which its __setitem__ and putenv keep current:
# reading it directly takes 0.05 us against os.environ.get's 1.2 us, on every call of the torch-facing kernels.
_ENVIRON = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(ENV_VAR) if _ENVIRON is not None else None
_OFF = (None,) + tuple(os.environ.encodevalue(v) for v in ("", "0")) if _ENVIRON is not None else ()


def interpret_requested() -> bool:
    """True when TKPY_INTERPRET is set (to anything but 0): `kernel[grid](...)` then runs on the CPU."""
    if _ENVIRON is not None:
        return _ENVIRON.get(_ENV_KEY) not in _OFF
    return os.environ.get(ENV_VAR, "0") not in ("", "0")


class Interpreted:
    """A kernel's interpreter launcher; its traced programs are cached per specialization."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._programs: dict = {}

    def __getitem__(self, grid):
        g = launch_grid(grid, self.kernel.cluster, self.kernel.name)
        return functools.partial(self.run, g)

    def program(self, args) -> Program:
        """The interpretable program for these arguments (traced once per specialization)."""
        return self._program(self.kernel.flat_args(args))

    def _program(self, args) -> Program:
        key, _ = self.kernel._bind(args, need_cuda=False)
        return self.kernel._once(self._programs, key, lambda: Program(self.kernel._trace(args).ir))

    def run(self, grid: tuple, *args) -> None:
        """Run the kernel over `grid` (3 ints) on these arguments. Tensors not on the CPU are copied to it
        and back."""
        self.run_flat(grid, self.kernel.flat_args(args))

    def run_flat(self, grid: tuple, args: tuple) -> None:
        """run() on arguments as the kernel's specs take them (a tk.PGL expanded: Kernel.flat_args)."""
        program = self._program(args)
        specs = self.kernel.specs
        on_cpu = [a.cpu() if spec.kind == "gl" and a.device.type != "cpu" else a for spec, a in zip(specs, args)]
        env = dict(bind_dims(specs, args))
        tensors = {}
        params = {p.name: p for p in program.ir.params}
        for spec, a in zip(specs, on_cpu):
            if spec.kind == "gl":
                tensors[params[spec.name]] = GlobalTensor(spec.name, a, spec.gl.dtype)
            elif spec.kind in SCALAR_DTYPES:
                env[spec.name] = to_f32(a) if SCALAR_DTYPES[spec.kind] == f32 else a
        run_grid(program, grid, env, tensors, os.environ.get(ORDER_ENV_VAR, "forward"))
        for a, cpu in zip(args, on_cpu):
            if cpu is not a:
                a.copy_(cpu)
