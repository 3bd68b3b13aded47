"""Code generators of the signals between GPUs and blocks (tk.signal, tk.wait_signal; prelude/peer.py).

A signal is one release by lane 0 once the warp has met (__syncwarp: the other lanes' writes come first); a wait
is polled by every lane, which then go on together."""
from __future__ import annotations

from ..ir.expr import render
from .emit import WARP_BARRIER, emits
from .ops_hopper import LANE0


def flag(op) -> str:
    """The C++ address of the op's flag: its tensor's element at the op's coordinates."""
    g, *coord = op.args[:5]
    return f"{g.name}.at({', '.join(render(c) for c in coord)})"


@emits("signal")
def emit_signal(em, op):
    yield WARP_BARRIER
    yield f"{LANE0}tk::signal_{op.attrs['op']}({flag(op)}, {render(op.args[5])});"


@emits("wait_signal")
def emit_wait_signal(em, op):
    value = render(op.args[5])
    if em.debug is not None:    # debug mode (codegen/debug.py): bounded, the flag's value reported on a timeout
        yield f"tk::debug::wait_signal({flag(op)}, {value}, {em.debug.site(op).index});"
    else:
        yield f"tk::wait_signal({flag(op)}, {value});"
    yield WARP_BARRIER
