"""Throughput of the ways an SM can compute exp2 (the softmax's bottleneck unit): the MUFU.EX2 of one
fp32 (what tk.exp2 compiles to), the packed half-precision MUFU forms, tkpy's polynomial on the FMA
pipes (the prelude's tk::exp2_emulated, what tk.exp2(x, emulated=n/8) compiles to: n of every 8 elements
by the polynomial).

Each thread runs 8 independent chains x <- -exp2(x) - 0.5 (one FFMA and one exp2 per element, as the
attention softmax has); the table gives exp2 results per SM and clock (at the boost clock the driver
reports) and each form's throughput against the plain MUFU.

    python3 benchmarks/bench_exp2.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHAINS = 8
ITERS = 4096
THREADS = 512
BLOCKS_PER_SM = 4

# Two results per MUFU instruction: pack two fp32 into a half2, one packed ex2, unpack both.
PACKED = r"""
        #pragma unroll
        for (int m = 0; m < CHAINS; m += 2) {{
            float a, b;
            asm volatile("{{ .reg .b32 p, r; .reg .b16 lo, hi;\n"
                         " {pack} p, %3, %2;\n {ex2} r, p;\n mov.b32 {{lo, hi}}, r;\n"
                         " {unpack} %0, lo;\n {unpack} %1, hi; }}" : "=f"(a), "=f"(b) : "f"(x[m]), "f"(x[m + 1]));
            x[m] = -a - 0.5f; x[m + 1] = -b - 0.5f;
        }}"""

FORMS = {
    "mufu_f32": ("1", r"""
        #pragma unroll
        for (int m = 0; m < CHAINS; m++) x[m] = -tk::op_exp2{}(x[m]) - 0.5f;"""),
    "mufu_f16x2": ("1", PACKED.format(pack="cvt.rn.f16x2.f32", ex2="ex2.approx.f16x2", unpack="cvt.f32.f16")),
    "mufu_bf16x2": ("1", PACKED.format(pack="cvt.rn.bf16x2.f32", ex2="ex2.approx.ftz.bf16x2", unpack="cvt.f32.bf16")),
}
# What else a softmax puts on the SM per score: P's conversion to bf16 (one cvt per pair; unpacked again by integer
# ops to keep the chain), alone and next to the MUFU: if both shared a unit the mix would run at 2/3 of the MUFU alone.
CVT = r"""
        #pragma unroll
        for (int m = 0; m < CHAINS; m += 2) {{
            float a = {a}, b = {b};
            unsigned p;
            asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(b), "f"(a));
            x[m] = __uint_as_float(p << 16) * -0.99f - 0.5f; x[m + 1] = __uint_as_float(p & 0xffff0000u) * -0.99f - 0.5f;
        }}"""
FORMS["cvt_bf16x2"] = ("0", CVT.format(a="x[m]", b="x[m + 1]"))
FORMS["mufu_and_cvt"] = ("0", CVT.format(a="tk::op_exp2{}(x[m])", b="tk::op_exp2{}(x[m + 1])"))
for share in (1, 2, 3, 4, 8):
    FORMS[f"poly_{share}of8"] = (str(share), r"""
        #pragma unroll
        for (int m = 0; m < CHAINS; m++) {
            x[m] = -tk::exp2_emulated<POLY_OF_8>(m, x[m]) - 0.5f;
        }""")


def source(name: str) -> str:
    share, body = FORMS[name]
    from tkpy.codegen.prelude import PRELUDE
    return (PRELUDE + f"#define CHAINS {CHAINS}\n#define POLY_OF_8 {share}\n" + f"""
extern "C" __global__ void __launch_bounds__({THREADS}) bench(float* out, int iters) {{
    float x[CHAINS];
    #pragma unroll
    for (int m = 0; m < CHAINS; m++) x[m] = -0.01f * (threadIdx.x % 97 + m);
    for (int it = 0; it < iters; it++) {{{body}
    }}
    float s = 0.0f;
    #pragma unroll
    for (int m = 0; m < CHAINS; m++) s += x[m];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}}
""")


def main() -> dict:
    """Prints the table; returns {form: results per SM and clock}."""
    import torch

    from benchmarks.timing import median_ms
    from tkpy.runtime import ParamBuffer, driver, launching, nvrtc

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    clock_ghz = driver.device_attribute("CLOCK_RATE", 0) / 1e6
    blocks = sms * BLOCKS_PER_SM
    out = torch.empty(blocks * THREADS, device="cuda")
    results = {}
    for name in FORMS:
        module = nvrtc.compile_cuda(source(name), "bench")
        kernel = launching.load_kernel(module)
        params = ParamBuffer(["ptr", "i32"])
        params.pack(out.data_ptr(), ITERS)

        def run():
            launching.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), 0, torch.cuda.current_stream().cuda_stream, params)

        ms = median_ms(run)
        per_sm_clk = blocks * THREADS * CHAINS * ITERS / (ms * 1e-3) / sms / (clock_ghz * 1e9)
        results[name] = per_sm_clk
    base = results["mufu_f32"]
    print(f"exp2 throughput, {sms} SMs at {clock_ghz:.2f} GHz (results per SM and clock; one FFMA per result too)")
    print("| form | per SM per clock | vs MUFU f32 |")
    print("|---|---|---|")
    for name, v in results.items():
        print(f"| {name} | {v:.1f} | {v / base:.2f}x |")
    return results


if __name__ == "__main__":
    main()
