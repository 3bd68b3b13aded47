// sha256 of the whole source: 67669f85598bbbbd3d802d1ffdeba651d258ebd0789bbcfbf1ff42d941472da4
// ---- end of prelude ----
// kernel golden_cluster, traced from debug_golden_kernels.py:71: 1 warps
extern "C" __global__ void __launch_bounds__(32) __cluster_dims__(2, 1, 1)
golden_cluster(tk::bf16* __restrict__ x_ptr, tk::bf16* __restrict__ y_ptr, int R, int R2,
    const __grid_constant__ tk::CUtensorMap x_tma_64x64_sw128) {
    const int block_x = blockIdx.x;
    const int laneid = threadIdx.x % 32;
    const int cluster_rank = tk::cluster_rank();
    extern __shared__ __align__(16) unsigned char tk_dynamic_smem[];
    unsigned char* const smem = tk::align_up(tk_dynamic_smem, 1024);  // swizzled tiles need 1024-byte alignment
    if (threadIdx.x == 0) {  // the tensor maps' descriptors, fetched ahead of their first use
        tk::tma::prefetch_map(&x_tma_64x64_sw128);
    }
    tk::launch_dependents();  // the next kernel on the stream may start its blocks as ours finish
    tk::wait_for_previous_kernel();  // global memory only once the previous kernel's writes show
    const tk::gl<tk::bf16> x{x_ptr, 1, 1, R, 64, (long long)R * 64, (long long)R * 64, 64};  // gl<bf16, R, 64>
    const tk::gl<tk::bf16> y{y_ptr, 1, 1, R2, 64, (long long)R2 * 64, (long long)R2 * 64, 64};  // gl<bf16, R2, 64>
    // debug_golden_kernels.py:73  s = tk.st(bf16, 64, 64)
    const tk::st<tk::bf16, 64, 64, 128> s{smem + 0};
    // debug_golden_kernels.py:74  loaded, done = tk.semaphore(), tk.semaphore()
    tk::semaphore* const loaded = reinterpret_cast<tk::semaphore*>(smem + 8192);
    tk::semaphore* const done = reinterpret_cast<tk::semaphore*>(smem + 8200);
    // debug_golden_kernels.py:75  t = tk.rt(bf16, 64, 64)
    tk::rt<tk::bf16, 4, 4, tk::row_l> t;
    // debug_golden_kernels.py:76  tk.init_semaphore(loaded, 1)
    if (laneid == 0) tk::init_semaphore(loaded, 1);
    if (laneid == 0) tk::fence_semaphore_init();  // visible to the cluster's async proxy
    // debug_golden_kernels.py:77  tk.init_semaphore(done, 1)
    if (laneid == 0) tk::init_semaphore(done, 1);
    if (laneid == 0) tk::fence_semaphore_init();  // visible to the cluster's async proxy
    // debug_golden_kernels.py:78  tk.cluster.sync()
    tk::cluster_sync();
    // debug_golden_kernels.py:79  tk.tma.expect(loaded, s)
    if (laneid == 0) tk::expect_bytes(loaded, 8192);
    // debug_golden_kernels.py:80  with tk.if_(tk.cluster.rank() == 0):
    if (cluster_rank == 0) {
        // debug_golden_kernels.py:81  tk.tma.load_async(s, x, (tk.block_idx.x // 2, 0), loaded, multicast=0b11)
        if (laneid == 0) tk::tma::load_async_multicast(s, &x_tma_64x64_sw128, 0, 0, block_x / 2 * 64, 0, loaded, 3);
    }
    // debug_golden_kernels.py:82  tk.wait(loaded, 0)
    tk::wait(loaded, 0);
    // debug_golden_kernels.py:83  tk.load(t, s)
    tk::load(t, s);
    // debug_golden_kernels.py:84  tk.store(y, t, (tk.block_idx.x, 0))
    tk::store(y, t, 0, 0, block_x * 64, 0);
    // debug_golden_kernels.py:85  with tk.if_(tk.cluster.rank() == 1):
    if (cluster_rank == 1) {
        // debug_golden_kernels.py:86  tk.cluster.arrive(done, 0)
        __syncwarp();
        if (laneid == 0) tk::arrive_remote(done, 0, 1);
    }
    // debug_golden_kernels.py:87  with tk.if_(tk.cluster.rank() == 0):
    if (cluster_rank == 0) {
        // debug_golden_kernels.py:88  tk.wait(done, 0)
        tk::wait(done, 0);
    }
    // debug_golden_kernels.py:89  tk.cluster.sync()
    tk::cluster_sync();
}
