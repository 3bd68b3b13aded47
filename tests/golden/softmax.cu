// sha256 of the whole source: 3cf5e13a2183aa15cf4e702317163646585b2550c81da692dc80efb380165cda
// ---- end of prelude ----
// kernel golden_softmax, traced from debug_golden_kernels.py:17: 4 warps
extern "C" __global__ void __launch_bounds__(128)
golden_softmax(tk::bf16* __restrict__ x_ptr, tk::bf16* __restrict__ y_ptr, int R) {
    const int block_x = blockIdx.x;
    const int warpid = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);  // warp-uniform
    tk::launch_dependents();  // the next kernel on the stream may start its blocks as ours finish
    tk::wait_for_previous_kernel();  // global memory only once the previous kernel's writes show
    const tk::gl<tk::bf16> x{x_ptr, 1, 1, R, 64, (long long)R * 64, (long long)R * 64, 64};  // gl<bf16, R, 64>
    const tk::gl<tk::bf16> y{y_ptr, 1, 1, R, 64, (long long)R * 64, (long long)R * 64, 64};  // gl<bf16, R, 64>
    // debug_golden_kernels.py:20  t = tk.rt(f32, 16, 64)
    tk::rt<float, 1, 4, tk::row_l> t;
    // debug_golden_kernels.py:21  m = tk.col_vec(t)
    tk::rv<float, 1, tk::ortho_l> m;
    // debug_golden_kernels.py:22  tk.load(t, x, (row, 0))
    tk::load(t, x, 0, 0, (block_x * 4 + warpid) * 16, 0);
    // debug_golden_kernels.py:23  tk.row_max(m, t)
    tk::row_max(m, t);
    // debug_golden_kernels.py:24  tk.sub_row(t, t, m)
    tk::sub_row(t, t, m);
    // debug_golden_kernels.py:25  tk.exp(t, t)
    tk::exp(t, t);
    // debug_golden_kernels.py:26  tk.sync()
    __syncthreads();
    // debug_golden_kernels.py:27  tk.store(y, t, (row, 0))
    tk::store(y, t, 0, 0, (block_x * 4 + warpid) * 16, 0);
}
