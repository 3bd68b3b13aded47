// sha256 of the whole source: 7ba3015c3c1a14ff84483a586c6c047f9cef2c7cb597f67870763e327b24027b
// ---- end of prelude ----
extern "C" __global__ void __launch_bounds__(256)  // kernel golden_ws, traced from debug_golden_kernels.py:34: 8 warps
golden_ws(tk::bf16* __restrict__ a_ptr, tk::bf16* __restrict__ b_ptr, float* __restrict__ c_ptr, int K,
    const __grid_constant__ tk::CUtensorMap a_tma_64x64_sw128,
    const __grid_constant__ tk::CUtensorMap b_tma_64x64_sw128) {
    const int warpid = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);  // warp-uniform
    const int laneid = threadIdx.x % 32;
    extern __shared__ __align__(16) unsigned char tk_dynamic_smem[];
    unsigned char* const smem = tk::align_up(tk_dynamic_smem, 1024);  // swizzled tiles need 1024-byte alignment
    if (threadIdx.x == 0) {  // the tensor maps' descriptors, fetched ahead of their first use
        tk::tma::prefetch_map(&a_tma_64x64_sw128);
        tk::tma::prefetch_map(&b_tma_64x64_sw128);
    }
    tk::launch_dependents();  // the next kernel on the stream may start its blocks as ours finish
    tk::wait_for_previous_kernel();  // global memory only once the previous kernel's writes show
    const tk::gl<tk::bf16> a{a_ptr, 1, 1, 64, K, (long long)64 * K, (long long)64 * K, K};  // gl<bf16, 64, K>
    const tk::gl<tk::bf16> b{b_ptr, 1, 1, K, 64, (long long)K * 64, (long long)K * 64, 64};  // gl<bf16, K, 64>
    const tk::gl<float> c{c_ptr, 1, 1, 64, 64, 4096, 4096, 64};  // gl<f32, 64, 64>
    // debug_golden_kernels.py:36  sa, sb = tk.st(bf16, 64, 64, count=2), tk.st(bf16, 64, 64, count=2)
    const tk::st_array<tk::st<tk::bf16, 64, 64, 128>, 2> sa{smem + 0};
    const tk::st_array<tk::st<tk::bf16, 64, 64, 128>, 2> sb{smem + 16384};
    // debug_golden_kernels.py:37  full, empty = tk.semaphore(2), tk.semaphore(2)
    tk::semaphore* const full = reinterpret_cast<tk::semaphore*>(smem + 32768);
    tk::semaphore* const empty = reinterpret_cast<tk::semaphore*>(smem + 32784);
    // debug_golden_kernels.py:38  acc = tk.rt(f32, 16, 64)
    tk::rt<float, 1, 4, tk::row_l> acc;
    // debug_golden_kernels.py:39  with tk.if_(tk.warp_id() == 0):
    if (warpid == 0) {
        // debug_golden_kernels.py:41  tk.init_semaphore(full[i], 1)
        if (laneid == 0) tk::init_semaphore(&full[0], 1);
        // debug_golden_kernels.py:42  tk.init_semaphore(empty[i], 4)
        if (laneid == 0) tk::init_semaphore(&empty[0], 4);
        // debug_golden_kernels.py:41  tk.init_semaphore(full[i], 1)
        if (laneid == 0) tk::init_semaphore(&full[1], 1);
        // debug_golden_kernels.py:42  tk.init_semaphore(empty[i], 4)
        if (laneid == 0) tk::init_semaphore(&empty[1], 4);
    }
    // debug_golden_kernels.py:43  tk.sync()
    __syncthreads();
    // debug_golden_kernels.py:44  with tk.if_(tk.warp_id() == 4):
    if (warpid == 4) {
        // debug_golden_kernels.py:45  for kk in tk.range(a.cols // 64):
        #pragma unroll 1
        for (int i0 = 0; i0 < K / 64; i0 += 1) {
            // debug_golden_kernels.py:46  stage = tk.let(kk % 2, "stage")
            const int stage = i0 % 2;
            // debug_golden_kernels.py:47  with tk.if_(kk >= 2):
            if (i0 >= 2) {
                // debug_golden_kernels.py:48  tk.wait(empty[stage], (kk // 2 - 1) % 2)
                tk::wait(&empty[stage], (i0 / 2 - 1) % 2);
            }
            // debug_golden_kernels.py:49  tk.tma.expect(full[stage], sa[stage], sb[stage])
            if (laneid == 0) tk::expect_bytes(&full[stage], 16384);
            // debug_golden_kernels.py:50  tk.tma.load_async(sa[stage], a, (0, kk), full[stage])
            if (laneid == 0) tk::tma::load_async(sa[stage], &a_tma_64x64_sw128, 0, 0, 0, i0 * 64, &full[stage]);
            // debug_golden_kernels.py:51  tk.tma.load_async(sb[stage], b, (kk, 0), full[stage])
            if (laneid == 0) tk::tma::load_async(sb[stage], &b_tma_64x64_sw128, 0, 0, i0 * 64, 0, &full[stage]);
        }
    }
    // debug_golden_kernels.py:52  with tk.if_(tk.warp_id() < 4):
    if (warpid < 4) {
        // debug_golden_kernels.py:53  tk.zero(acc)
        tk::fill(acc, 0.0f);
        // debug_golden_kernels.py:54  for kk in tk.range(a.cols // 64):
        #pragma unroll 1
        for (int kk = 0; kk < K / 64; kk += 1) {
            // debug_golden_kernels.py:55  stage = tk.let(kk % 2, "stage")
            const int stage_1 = kk % 2;
            // debug_golden_kernels.py:56  tk.wait(full[stage], (kk // 2) % 2)
            tk::wait(&full[stage_1], kk / 2 % 2);
            // debug_golden_kernels.py:57  tk.warpgroup.mma_AB(acc, sa[stage], sb[stage])
            tk::warpgroup::mma_AB(acc, sa[stage_1], sb[stage_1]);
            // debug_golden_kernels.py:58  tk.warpgroup.mma_async_wait()
            tk::wgmma_wait<0>();
            tk::register_fence(acc);
            // debug_golden_kernels.py:59  tk.arrive(empty[stage])
            __syncwarp();
            if (laneid == 0) tk::arrive(&empty[stage_1], 1);
        }
        // debug_golden_kernels.py:60  tk.named_sync(1, 4)
        tk::named_sync(1, 128);
        // debug_golden_kernels.py:61  tk.named_arrive(2, 4)
        tk::named_arrive(2, 128);
        // debug_golden_kernels.py:62  seen = tk.warpgroup.any(tk.warp_id() == 0, 3)
        bool seen = false;
        seen = tk::named_any(warpid == 0, 3, 128);
        // debug_golden_kernels.py:63  with tk.if_(seen):
        if (seen) {
            // debug_golden_kernels.py:64  tk.warpgroup.store(c, acc, (0, 0))
            tk::store(c, acc, 0, 0, warpid % 4 * 16, 0);
        }
    }
}
