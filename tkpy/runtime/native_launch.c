/* tkpy's native launch path: one C call per kernel launch on a cache hit.
 *
 * Built on first use by tkpy/runtime/native.py with the C compiler Python was built with; plain
 * Python C API, no CUDA or torch headers (the few CUDA driver structs are declared below).
 *
 *   Launcher(spec_kinds, fast, slow)       one per @tk.kernel; `launcher(grid, *args)` launches
 *   Entry(...)                             one per specialization and device (the values of `fast`)
 *
 * A call does what tkpy/frontend/fastpath.py's generated Python does, in the same order and with
 * the same outcomes: the key (per tensor dtype, shape, is_contiguous(), get_device(); constexprs by
 * value; other scalars by type), one lookup in `fast`, the data pointers and their 16-byte alignment
 * check, the packing of every slot with struct's rules, torch's current stream, cuLaunchKernelEx.
 * Whatever the Python path sends to `slow(grid, args)` (no entry, a missing attribute, an unhashable
 * key, a misaligned pointer, a value struct would not pack) goes there here too.
 *
 * The parameter block is packed on the C stack, so concurrent calls from several threads are safe;
 * the GIL is released around the driver call only. If the launch fails, `failed(err, grid, stream,
 * params_address)` (Python) retries or raises, with the address of this call's own block (still on this
 * thread's stack): a retry from a buffer shared between threads could launch another thread's values.
 *
 * An entry made with a context (its device's primary context, and the driver's cuCtxGetCurrent, cuCtxPushCurrent
 * and cuCtxPopCurrent) launches under it, as tkpy.runtime.launching.Launcher does: where the calling thread has
 * another context current (its current device is not the tensors') or none, the context is pushed around the
 * launch and popped after, so that the function, the stream and the arguments all belong to one device.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000          /* 3.10: the private spellings, on unsigned bytes */
#define PyFloat_Pack4(x, p, le) _PyFloat_Pack4((x), (unsigned char *)(p), (le))
#define PyFloat_Pack8(x, p, le) _PyFloat_Pack8((x), (unsigned char *)(p), (le))
#endif

/* ---- CUDA driver ABI (cuda.h, CUDA >= 11.8) ---------------------------------------------------- */
typedef int CUresult;

typedef struct {
    unsigned int id;                    /* CUlaunchAttributeID */
    char pad[4];
    union {
        char raw[64];
        struct { unsigned int x, y, z; } clusterDim;
        unsigned long long align8;
    } value;
} CUlaunchAttribute;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void *hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef CUresult (*LaunchKernelEx)(const CUlaunchConfig *config, void *f, void **params, void **extra);
typedef CUresult (*CtxGetCurrent)(void **ctx);
typedef CUresult (*CtxPushCurrent)(void *ctx);
typedef CUresult (*CtxPopCurrent)(void **ctx);

#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6   /* value: an int, 1 = allowed */

_Static_assert(sizeof(CUlaunchAttribute) == 72 && offsetof(CUlaunchAttribute, value) == 8, "CUlaunchAttribute ABI");
_Static_assert(sizeof(CUlaunchConfig) == 56 && offsetof(CUlaunchConfig, hStream) == 32
               && offsetof(CUlaunchConfig, numAttrs) == 48, "CUlaunchConfig ABI");

/* A launch function that does nothing (for measuring this path's own cost without a GPU). */
static CUresult noop_launch(const CUlaunchConfig *c, void *f, void **p, void **e)
{
    (void)c; (void)f; (void)p; (void)e;
    return 0;
}

/* ---- slot layout -------------------------------------------------------------------------------- */
enum { SPEC_GL, SPEC_CONSTEXPR, SPEC_SCALAR };                          /* a kernel argument */
enum { K_U64, K_I64, K_I32, K_U32, K_F32, K_F64, K_BLOB128 };           /* a slot's C type */
enum { S_PTR, S_DIM, S_SCALAR, S_TMAP };                                /* where its value comes from */

static const char *const KIND_NAMES[] = {"u64", "i64", "i32", "u32", "f32", "f64", "blob128"};
static const char *const SOURCE_NAMES[] = {"ptr", "dim", "scalar", "tmap"};

typedef struct {
    int kind, source;
    Py_ssize_t offset;
    Py_ssize_t arg;     /* the kernel argument it reads */
    Py_ssize_t index;   /* S_DIM: the axis of that tensor's shape; S_TMAP: the tensor-map encoder */
    Py_ssize_t cache;   /* S_TMAP: its TmapCache in the entry */
} Slot;

/* The latest tensor maps of one S_TMAP slot by data pointer and shape. An entry is one compiled specialization
 * on one device: its tensors have one dtype and are contiguous (strided tensors never take this path), so the map
 * is a function of the pointer and the shape (the entry serves every shape of its dynamic dims), and a hit spares
 * the call of the Python encoder (about 1 us a map). */
#define TMAP_WAYS 4
#define TMAP_MAX_DIMS 5
typedef struct {
    uint64_t ptr;
    Py_ssize_t ndim;
    long long dims[TMAP_MAX_DIMS];
    char blob[128];
} TmapWay;

typedef struct {
    TmapWay way[TMAP_WAYS];
    int filled, next;
} TmapCache;

#define ALIGNMENT 16            /* data pointers (tkpy.frontend.signature.ALIGNMENT) */
#define STACK_BLOCK 4096        /* parameter blocks up to this size are packed on the stack */
#define STACK_SLOTS 512

static PyObject *str_dtype, *str_shape, *str_is_contiguous, *str_get_device, *str_data_ptr;

/* Pack `v` as struct would for the kind: 0 packed, 1 struct.error (the caller takes the slow path),
 * -1 any other error (raised, as struct raises it). */
static int pack_value(int kind, PyObject *v, char *dst)
{
    switch (kind) {
    case K_U64: case K_I64: case K_I32: case K_U32: {
        if (!PyLong_Check(v) && !PyIndex_Check(v))
            return 1;   /* "required argument is not an integer" */
        PyObject *index = PyNumber_Index(v);
        if (index == NULL)
            return -1;
        int overflow = 0, status = 0;
        if (kind == K_U64) {
            unsigned long long x = PyLong_AsUnsignedLongLong(index);
            if (x == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); status = 1; }
            else memcpy(dst, &x, 8);
        } else {
            long long x = PyLong_AsLongLongAndOverflow(index, &overflow);
            if (x == -1 && PyErr_Occurred()) status = -1;
            else if (overflow) status = 1;
            else if (kind == K_I64) memcpy(dst, &x, 8);
            else if (kind == K_I32 && x >= INT32_MIN && x <= INT32_MAX) { int32_t y = (int32_t)x; memcpy(dst, &y, 4); }
            else if (kind == K_U32 && x >= 0 && x <= UINT32_MAX) { uint32_t y = (uint32_t)x; memcpy(dst, &y, 4); }
            else status = 1;
        }
        Py_DECREF(index);
        return status;
    }
    case K_F32: case K_F64: {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 1; }   /* "required argument is not a float" */
        if (kind == K_F32 && x - x == 0.0 && (x > 3.4028234663852886e38 || x < -3.4028234663852886e38))
            return 1;   /* finite but past float's range: the Python path raises the ArgumentError */
        /* little-endian, as struct's "<f"/"<d"; a finite value too large for a float raises OverflowError */
        return (kind == K_F32 ? PyFloat_Pack4(x, dst, 1) : PyFloat_Pack8(x, dst, 1)) ? -1 : 0;
    }
    case K_BLOB128: {
        char *bytes; Py_ssize_t n;
        if (PyBytes_Check(v)) {
            bytes = PyBytes_AS_STRING(v);
            n = PyBytes_GET_SIZE(v);
        } else if (PyByteArray_Check(v)) {
            bytes = PyByteArray_AS_STRING(v);
            n = PyByteArray_GET_SIZE(v);
        } else {
            return 1;   /* "argument for 's' must be a bytes object" */
        }
        if (n > 128) n = 128;           /* struct's "128s": truncated or zero-padded */
        memcpy(dst, bytes, (size_t)n);
        memset(dst + n, 0, (size_t)(128 - n));
        return 0;
    }
    }
    PyErr_SetString(PyExc_SystemError, "tkpy native launch: unknown slot kind");
    return -1;
}

/* ---- Entry: one specialization loaded on one device ------------------------------------------- */
typedef struct {
    PyObject_HEAD
    LaunchKernelEx launch;
    void *function;                     /* CUfunction */
    void *context;                      /* CUcontext to launch under; NULL: whichever is current */
    CtxGetCurrent ctx_get;              /* with a context: the driver's calls to switch to it */
    CtxPushCurrent ctx_push;
    CtxPopCurrent ctx_pop;
    unsigned int block[3], smem;
    CUlaunchAttribute attrs[2];         /* cluster dimensions, programmatic stream serialization: built once */
    unsigned int num_attrs;
    Py_ssize_t nargs, nslots, size;
    char *spec_kinds;                   /* SPEC_* per kernel argument (must match the Launcher's) */
    Slot *slots;
    TmapCache *tmap_caches;             /* one per S_TMAP slot */
    void **params_address;              /* the ParamBuffer's void*[] (for launch_prepacked) */
    PyObject *params;                   /* the ParamBuffer: keeps it alive */
    PyObject *tensor_maps;              /* tuple of callables: tensor -> 128 bytes */
    PyObject *device;                   /* int, passed to stream_of */
    PyObject *stream_of;                /* device -> raw stream handle (torch's current stream) */
    PyObject *failed;                   /* (err, grid, stream, params_address) -> None or raise */
} Entry;

static PyTypeObject EntryType;

static int entry_traverse(Entry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->params); Py_VISIT(self->tensor_maps); Py_VISIT(self->device);
    Py_VISIT(self->stream_of); Py_VISIT(self->failed);
    return 0;
}

static int entry_clear(Entry *self)
{
    Py_CLEAR(self->params); Py_CLEAR(self->tensor_maps); Py_CLEAR(self->device);
    Py_CLEAR(self->stream_of); Py_CLEAR(self->failed);
    return 0;
}

static void entry_dealloc(Entry *self)
{
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->tmap_caches);
    PyMem_Free(self->spec_kinds);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int dim3(PyObject *seq, unsigned int out[3], const char *what)
{
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != 3) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of 3 ints", what);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        unsigned long x = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(seq, i));
        if (x == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        if (x > UINT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s %R does not fit 32-bit unsigned ints", what, seq);
            return -1;
        }
        out[i] = (unsigned int)x;
    }
    return 0;
}

/* The grid of a launch, checking that the entry has a launch function (one made for packing only
 * has none). */
static int launch_grid(Entry *e, PyObject *grid, unsigned int out[3])
{
    if (e->launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tkpy native launch: this entry has no launch function");
        return -1;
    }
    return dim3(grid, out, "grid");
}

/* Entry(launch, function, block, smem, cluster, dependent_launch, layout, size, spec_kinds, tensor_maps,
 *       device, stream_of, failed, params, params_address, context=0, context_api=None)
 * layout: per slot (kind, offset, source, arg, index), kinds and sources as in KINDS / SOURCES;
 * spec_kinds: bytes, one SPEC_* per kernel argument; context: a CUcontext handle (0: none), which needs
 * context_api, the addresses of (cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent). */
static int entry_init(Entry *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"launch", "function", "block", "smem", "cluster", "dependent_launch", "layout", "size",
                            "spec_kinds", "tensor_maps", "device", "stream_of", "failed", "params",
                            "params_address", "context", "context_api", NULL};
    unsigned long long launch, function, address, context = 0, api[3] = {0, 0, 0};
    unsigned int smem;
    PyObject *block, *cluster, *layout, *tensor_maps, *device, *stream_of, *failed, *params, *context_api = Py_None;
    Py_buffer spec;
    Py_ssize_t size;
    int dependent_launch;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKOIOpOny*O!OOOOK|KO", names, &launch, &function, &block, &smem,
                                     &cluster, &dependent_launch, &layout, &size, &spec, &PyTuple_Type,
                                     &tensor_maps, &device, &stream_of, &failed, &params, &address, &context,
                                     &context_api))
        return -1;
    const char *spec_kinds = spec.buf;
    Py_ssize_t nargs = spec.len;
    int status = -1;
    if (self->slots != NULL) {
        PyErr_SetString(PyExc_TypeError, "Entry is already initialised");
        goto done;
    }
    if (dim3(block, self->block, "block") < 0)
        goto done;
    if (context_api != Py_None && !PyArg_ParseTuple(context_api, "KKK;context_api is (cuCtxGetCurrent, "
                                                    "cuCtxPushCurrent, cuCtxPopCurrent) addresses",
                                                    &api[0], &api[1], &api[2]))
        goto done;
    if (context && !(api[0] && api[1] && api[2])) {
        PyErr_SetString(PyExc_ValueError, "an Entry with a context needs context_api: the driver's addresses of "
                                          "cuCtxGetCurrent, cuCtxPushCurrent and cuCtxPopCurrent");
        goto done;
    }
    memset(self->attrs, 0, sizeof self->attrs);
    self->num_attrs = 0;
    if (cluster != Py_None) {
        CUlaunchAttribute *attr = &self->attrs[self->num_attrs++];
        unsigned int dims[3];
        if (dim3(cluster, dims, "cluster") < 0)
            goto done;
        attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr->value.clusterDim.x = dims[0];
        attr->value.clusterDim.y = dims[1];
        attr->value.clusterDim.z = dims[2];
    }
    if (dependent_launch) {             /* runtime/dependent_launch.py */
        CUlaunchAttribute *attr = &self->attrs[self->num_attrs++];
        attr->id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        *(int *)attr->value.raw = 1;    /* programmaticStreamSerializationAllowed */
    }
    if (!PyTuple_Check(layout)) {
        PyErr_SetString(PyExc_TypeError, "layout must be a tuple of (kind, offset, source, arg, index)");
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(layout), tmap_slots = 0;
    self->slots = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Slot));
    self->spec_kinds = PyMem_Malloc((size_t)(nargs ? nargs : 1));
    if (self->slots == NULL || self->spec_kinds == NULL) { PyErr_NoMemory(); goto done; }
    memcpy(self->spec_kinds, spec_kinds, (size_t)nargs);
    for (Py_ssize_t i = 0; i < n; i++) {
        Slot *s = &self->slots[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(layout, i), "iniin;layout entries are (kind, offset, source, arg, index)",
                              &s->kind, &s->offset, &s->source, &s->arg, &s->index))
            goto done;
        int width = s->kind == K_BLOB128 ? 128 : (s->kind == K_I32 || s->kind == K_U32 || s->kind == K_F32) ? 4 : 8;
        int tensor_source = s->source == S_PTR || s->source == S_DIM || s->source == S_TMAP;
        if (s->kind < K_U64 || s->kind > K_BLOB128 || s->source < S_PTR || s->source > S_TMAP
            || s->offset < 0 || s->offset + width > size || s->arg < 0 || s->arg >= nargs
            || (tensor_source && spec_kinds[s->arg] != SPEC_GL) || (s->source == S_PTR && s->kind != K_U64)
            || (s->source == S_TMAP && s->kind != K_BLOB128)
            || (s->source == S_TMAP && (s->index < 0 || s->index >= PyTuple_GET_SIZE(tensor_maps)))
            || (s->source == S_DIM && s->index < 0)) {
            PyErr_Format(PyExc_ValueError, "bad layout entry %zd: %R", i, PyTuple_GET_ITEM(layout, i));
            goto done;
        }
        s->cache = s->source == S_TMAP ? tmap_slots++ : -1;
    }
    self->tmap_caches = PyMem_Calloc((size_t)(tmap_slots ? tmap_slots : 1), sizeof(TmapCache));
    if (self->tmap_caches == NULL) { PyErr_NoMemory(); goto done; }
    self->launch = (LaunchKernelEx)(uintptr_t)launch;
    self->function = (void *)(uintptr_t)function;
    self->context = (void *)(uintptr_t)context;
    self->ctx_get = (CtxGetCurrent)(uintptr_t)api[0];
    self->ctx_push = (CtxPushCurrent)(uintptr_t)api[1];
    self->ctx_pop = (CtxPopCurrent)(uintptr_t)api[2];
    self->smem = smem;
    self->nargs = nargs;
    self->nslots = n;
    self->size = size;
    self->params_address = (void **)(uintptr_t)address;
    Py_INCREF(tensor_maps); self->tensor_maps = tensor_maps;
    Py_INCREF(device); self->device = device;
    Py_INCREF(stream_of); self->stream_of = stream_of;
    Py_INCREF(failed); self->failed = failed;
    Py_INCREF(params); self->params = params;
    status = 0;
done:
    PyBuffer_Release(&spec);
    return status;
}

/* The tensor map of slot `s` for `tensor` (at `ptr`) into `dst`: from the slot's cache, else from its Python
 * encoder, whose 128 bytes are then cached (the GIL is held from the lookup to the store). 0, 1 (slow path) or -1. */
static int pack_tensor_map(Entry *e, const Slot *s, PyObject *tensor, PyObject *shape, uint64_t ptr, char *dst)
{
    TmapCache *c = &e->tmap_caches[s->cache];
    TmapWay probe = {.ptr = ptr, .ndim = -1};          /* ndim -1: a shape this cache does not hold */
    if (PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) <= TMAP_MAX_DIMS) {
        probe.ndim = PyTuple_GET_SIZE(shape);
        for (Py_ssize_t d = 0; d < probe.ndim && probe.ndim >= 0; d++) {
            probe.dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            if (probe.dims[d] == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                probe.ndim = -1;
            }
        }
    }
    for (int j = 0; j < c->filled && probe.ndim >= 0; j++) {
        const TmapWay *w = &c->way[j];
        if (w->ptr == ptr && w->ndim == probe.ndim
            && !memcmp(w->dims, probe.dims, (size_t)probe.ndim * sizeof(long long))) {
            memcpy(dst, w->blob, 128);
            return 0;
        }
    }
    PyObject *blob = PyObject_CallOneArg(PyTuple_GET_ITEM(e->tensor_maps, s->index), tensor);
    if (blob == NULL)
        return -1;
    int status = pack_value(K_BLOB128, blob, dst);
    Py_DECREF(blob);
    if (status == 0 && probe.ndim >= 0) {
        memcpy(probe.blob, dst, 128);
        c->way[c->next] = probe;
        c->next = (c->next + 1) % TMAP_WAYS;
        if (c->filled < TMAP_WAYS)
            c->filled += 1;
    }
    return status;
}

/* The slot values of one call into `block` (0), or 1 for the slow path, or -1 on an error. `shapes`
 * and `ptrs` hold each tensor argument's shape and data pointer. */
static int pack_call(Entry *e, PyObject *const *args, PyObject *const *shapes, const uint64_t *ptrs, char *block)
{
    for (Py_ssize_t i = 0; i < e->nslots; i++) {
        const Slot *s = &e->slots[i];
        char *dst = block + s->offset;
        int status;
        switch (s->source) {
        case S_PTR:
            memcpy(dst, &ptrs[s->arg], 8);
            continue;
        case S_DIM: {
            PyObject *shape = shapes[s->arg];
            if (!PyTuple_Check(shape) || s->index >= PyTuple_GET_SIZE(shape))
                return 1;
            status = pack_value(s->kind, PyTuple_GET_ITEM(shape, s->index), dst);
            break;
        }
        case S_SCALAR:
            status = pack_value(s->kind, args[s->arg], dst);
            break;
        default:    /* S_TMAP */
            status = pack_tensor_map(e, s, args[s->arg], shapes[s->arg], ptrs[s->arg], dst);
        }
        if (status)
            return status;
    }
    return 0;
}

static void clear_padding(Entry *e, char *block)
{
    memset(block, 0, (size_t)e->size);
}

/* launch(cfg, function, params) under the entry's context: as it is where that context is current (or the entry has
 * none), else with it pushed around the call (the first error of the three calls is the result). */
static CUresult launch_in_context(Entry *e, const CUlaunchConfig *cfg, void **params)
{
    void *current = NULL;
    if (e->context == NULL)
        return e->launch(cfg, e->function, params, NULL);
    CUresult err = e->ctx_get(&current);
    if (err)
        return err;
    if (current == e->context)
        return e->launch(cfg, e->function, params, NULL);
    err = e->ctx_push(e->context);
    if (err)
        return err;
    err = e->launch(cfg, e->function, params, NULL);
    void *popped = NULL;
    CUresult pop_err = e->ctx_pop(&popped);
    return err ? err : pop_err;
}

/* Build the launch configuration and call the driver with the GIL released (launch != NULL). */
static CUresult launch_packed(Entry *e, const unsigned int grid[3], void *stream, void **params)
{
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0]; cfg.gridDimY = grid[1]; cfg.gridDimZ = grid[2];
    cfg.blockDimX = e->block[0]; cfg.blockDimY = e->block[1]; cfg.blockDimZ = e->block[2];
    cfg.sharedMemBytes = e->smem;
    cfg.hStream = stream;
    cfg.attrs = e->attrs;               /* the driver only reads them */
    cfg.numAttrs = e->num_attrs;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = launch_in_context(e, &cfg, params);
    Py_END_ALLOW_THREADS
    return err;
}

/* torch's current stream on the entry's device: a new reference to the handle (an int) and the raw value. */
static PyObject *current_stream(Entry *e, void **raw)
{
    PyObject *stream = PyObject_CallOneArg(e->stream_of, e->device);
    if (stream == NULL)
        return NULL;
    *raw = PyLong_AsVoidPtr(stream);
    if (*raw == NULL && PyErr_Occurred()) {
        Py_DECREF(stream);
        return NULL;
    }
    return stream;
}

/* failed(err, grid, stream, params_address): the retry after a missing context (or the error) in Python,
 * from `params` (this call's block: the retry must not read a buffer that another thread may refill). */
static PyObject *call_failed(Entry *e, CUresult err, PyObject *grid, PyObject *stream, void **params)
{
    PyObject *code = PyLong_FromLong(err);
    PyObject *address = code ? PyLong_FromVoidPtr(params) : NULL;
    PyObject *result = address ? PyObject_CallFunctionObjArgs(e->failed, code, grid, stream, address, NULL) : NULL;
    Py_XDECREF(code);
    Py_XDECREF(address);
    return result;
}

/* Packed block in hand: stream, launch, and on failure hand the error to Python with the block's address. */
static PyObject *launch_block(Entry *e, PyObject *grid, char *block, void **slot_ptrs)
{
    unsigned int g[3];
    void *raw;
    if (launch_grid(e, grid, g) < 0)
        return NULL;
    PyObject *stream = current_stream(e, &raw);
    if (stream == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < e->nslots; i++)
        slot_ptrs[i] = block + e->slots[i].offset;
    CUresult err = launch_packed(e, g, raw, slot_ptrs);
    PyObject *result = Py_None;
    Py_INCREF(result);
    if (err) {
        Py_DECREF(result);
        result = call_failed(e, err, grid, stream, slot_ptrs);
    }
    Py_DECREF(stream);
    return result;
}

/* entry.pack_values(values) -> bytes of the parameter block, or None where ParamBuffer.pack would
 * raise struct.error (for tests: must equal ParamBuffer.pack byte for byte). */
static PyObject *entry_pack_values(Entry *self, PyObject *values)
{
    if (!PyTuple_Check(values) || PyTuple_GET_SIZE(values) != self->nslots) {
        PyErr_Format(PyExc_TypeError, "pack_values takes a tuple of %zd values", self->nslots);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->size);
    if (out == NULL)
        return NULL;
    char *block = PyBytes_AS_STRING(out);
    clear_padding(self, block);
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        int status = pack_value(self->slots[i].kind, PyTuple_GET_ITEM(values, i), block + self->slots[i].offset);
        if (status) {
            Py_DECREF(out);
            if (status < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    return out;
}

/* entry.launch_prepacked(grid, stream): cuLaunchKernelEx from C with the ParamBuffer as it is, on a
 * raw stream handle (for measuring the driver call alone; no checks; errors go to `failed`). */
static PyObject *entry_launch_prepacked(Entry *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned int g[3];
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "launch_prepacked takes (grid, stream)");
        return NULL;
    }
    if (launch_grid(self, args[0], g) < 0)
        return NULL;
    void *raw = PyLong_AsVoidPtr(args[1]);
    if (raw == NULL && PyErr_Occurred())
        return NULL;
    CUresult err = launch_packed(self, g, raw, self->params_address);
    if (!err)
        Py_RETURN_NONE;
    return call_failed(self, err, args[0], args[1], self->params_address);
}

static PyObject *entry_get_size(Entry *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->size);
}

static PyMethodDef entry_methods[] = {
    {"pack_values", (PyCFunction)entry_pack_values, METH_O, "Pack slot values like ParamBuffer.pack: bytes, or None."},
    {"launch_prepacked", (PyCFunction)(void (*)(void))entry_launch_prepacked, METH_FASTCALL,
     "launch_prepacked(grid, stream): launch with the ParamBuffer as packed."},
    {NULL}
};

static PyGetSetDef entry_getset[] = {
    {"size", (getter)entry_get_size, NULL, "bytes in the parameter block", NULL},
    {NULL}
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tkpy_native_launch.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One kernel specialization loaded on one device: launch data and parameter layout.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)entry_init,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_methods = entry_methods,
    .tp_getset = entry_getset,
};

/* ---- Launcher: one kernel's per-call path ----------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t nargs, keylen;
    char *spec_kinds;
    PyObject *fast;     /* dict: key -> Entry (the kernel's cache, shared with its slow path) */
    PyObject *slow;     /* (grid, args) -> None: first calls and anything unusual */
    PyObject *last_key, *last_entry;    /* the latest hit, checked before the dict */
} Launcher;

static int launcher_traverse(Launcher *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fast); Py_VISIT(self->slow); Py_VISIT(self->last_key); Py_VISIT(self->last_entry);
    return 0;
}

static int launcher_clear(Launcher *self)
{
    Py_CLEAR(self->fast); Py_CLEAR(self->slow); Py_CLEAR(self->last_key); Py_CLEAR(self->last_entry);
    return 0;
}

static void launcher_dealloc(Launcher *self)
{
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    PyMem_Free(self->spec_kinds);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *launcher_slow(Launcher *self, PyObject *grid, PyObject *const *args, Py_ssize_t n)
{
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *result = PyObject_CallFunctionObjArgs(self->slow, grid, tuple, NULL);
    Py_DECREF(tuple);
    return result;
}

/* Not a tensor where one belongs, or an unhashable constexpr: the slow path explains (the Python
 * launcher catches the same two). Anything else is raised. */
static int slow_error(void)
{
    if (PyErr_ExceptionMatches(PyExc_AttributeError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* The key of fastpath.cache_key as a new tuple, or NULL with an error set. shapes[i] is borrowed
 * from the key. */
static PyObject *launcher_key(Launcher *self, PyObject *const *args, PyObject **shapes)
{
    PyObject *key = PyTuple_New(self->keylen);
    if (key == NULL)
        return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        PyObject *a = args[i];
        shapes[i] = NULL;
        if (self->spec_kinds[i] == SPEC_GL) {
            PyObject *parts[4];
            parts[0] = PyObject_GetAttr(a, str_dtype);
            parts[1] = parts[0] ? PyObject_GetAttr(a, str_shape) : NULL;
            parts[2] = parts[1] ? PyObject_CallMethodNoArgs(a, str_is_contiguous) : NULL;
            parts[3] = parts[2] ? PyObject_CallMethodNoArgs(a, str_get_device) : NULL;
            for (int j = 0; j < 4; j++) {
                if (parts[j] == NULL) {
                    Py_DECREF(key);
                    return NULL;
                }
                PyTuple_SET_ITEM(key, k++, parts[j]);
            }
            shapes[i] = parts[1];
        } else {
            PyObject *part = self->spec_kinds[i] == SPEC_CONSTEXPR ? a : (PyObject *)Py_TYPE(a);
            Py_INCREF(part);
            PyTuple_SET_ITEM(key, k++, part);
        }
    }
    return key;
}

/* The kernel's cache only grows (its slow path adds a key once, never replaces or removes one), so the
 * latest hit stays what the dict maps its key to.
 *
 * Whether `key` equals the latest hit's key such that the dict would map it to the same entry: the
 * same objects everywhere (dtypes, bools, device ints, constexprs, scalar types) except the shapes,
 * which are fresh torch.Size objects each call and must have the same type and equal dims. Anything
 * else goes to the dict, so this shortcut never accepts a key the dict would not. */
static int same_as_last(Launcher *self, PyObject *key)
{
    PyObject *last = self->last_key;
    if (last == NULL)
        return 0;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        if (self->spec_kinds[i] != SPEC_GL) {
            if (PyTuple_GET_ITEM(key, k) != PyTuple_GET_ITEM(last, k))
                return 0;
            k += 1;
            continue;
        }
        PyObject *shape = PyTuple_GET_ITEM(key, k + 1), *last_shape = PyTuple_GET_ITEM(last, k + 1);
        if (PyTuple_GET_ITEM(key, k) != PyTuple_GET_ITEM(last, k)
            || PyTuple_GET_ITEM(key, k + 2) != PyTuple_GET_ITEM(last, k + 2)
            || PyTuple_GET_ITEM(key, k + 3) != PyTuple_GET_ITEM(last, k + 3)
            || Py_TYPE(shape) != Py_TYPE(last_shape) || !PyTuple_Check(shape)
            || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(last_shape))
            return 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(shape); j++) {
            PyObject *a = PyTuple_GET_ITEM(shape, j), *b = PyTuple_GET_ITEM(last_shape, j);
            if (a != b && !(PyLong_CheckExact(a) && PyLong_CheckExact(b)
                            && PyObject_RichCompareBool(a, b, Py_EQ) == 1))
                return 0;
        }
        k += 4;
    }
    return 1;
}

static PyObject *launcher_vectorcall(Launcher *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "a tkpy kernel launch takes positional arguments only");
        return NULL;
    }
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "a tkpy launch takes (grid, *args)");
        return NULL;
    }
    PyObject *grid = argv[0];
    PyObject *const *args = argv + 1;
    n -= 1;
    if (n != self->nargs)
        return launcher_slow(self, grid, args, n);

    PyObject *shapes_small[16];
    uint64_t ptrs_small[16];
    PyObject **shapes = shapes_small;
    uint64_t *ptrs = ptrs_small;
    PyObject *key = NULL, *result = NULL;
    Entry *entry = NULL;
    char *heap = NULL;
    if (n > 16) {
        shapes = PyMem_Malloc((size_t)n * sizeof(PyObject *));
        ptrs = PyMem_Malloc((size_t)n * sizeof(uint64_t));
        if (shapes == NULL || ptrs == NULL) { PyErr_NoMemory(); goto done; }
    }

    key = launcher_key(self, args, shapes);
    if (key == NULL) {
        if (slow_error())
            result = launcher_slow(self, grid, args, n);
        goto done;
    }
    if (same_as_last(self, key)) {
        entry = (Entry *)self->last_entry;
    } else {
        entry = (Entry *)PyDict_GetItemWithError(self->fast, key);
        if (entry == NULL) {
            if (!PyErr_Occurred() || slow_error())     /* a miss, or an unhashable constexpr */
                result = launcher_slow(self, grid, args, n);
            goto done;
        }
        if (Py_TYPE(entry) != &EntryType || entry->nargs != n || memcmp(entry->spec_kinds, self->spec_kinds, (size_t)n)) {
            entry = NULL;
            PyErr_SetString(PyExc_SystemError, "tkpy native launch: the kernel's cache holds a foreign entry");
            goto done;
        }
        Py_INCREF(key);
        Py_XSETREF(self->last_key, key);
        Py_INCREF(entry);
        Py_XSETREF(self->last_entry, (PyObject *)entry);
    }
    Py_INCREF(entry);

    uint64_t any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (self->spec_kinds[i] != SPEC_GL)
            continue;
        PyObject *p = PyObject_CallMethodNoArgs(args[i], str_data_ptr);
        if (p == NULL)
            goto done;
        ptrs[i] = PyLong_AsUnsignedLongLong(p);
        Py_DECREF(p);
        if (ptrs[i] == (uint64_t)-1 && PyErr_Occurred())
            goto done;
    }
    for (Py_ssize_t i = 0; i < entry->nslots; i++)     /* the pointers the kernel takes */
        if (entry->slots[i].source == S_PTR)
            any |= ptrs[entry->slots[i].arg];
    if (any % ALIGNMENT) {
        result = launcher_slow(self, grid, args, n);
        goto done;
    }

    _Alignas(64) char block_small[STACK_BLOCK];
    void *ptr_small[STACK_SLOTS];
    char *block = block_small;
    void **slot_ptrs = ptr_small;
    if (entry->size > STACK_BLOCK || entry->nslots > STACK_SLOTS) {
        heap = PyMem_Malloc((size_t)entry->size + 64 + 8 + (size_t)entry->nslots * sizeof(void *));
        if (heap == NULL) { PyErr_NoMemory(); goto done; }
        block = heap + ((64 - (uintptr_t)heap % 64) % 64);
        slot_ptrs = (void **)(block + entry->size + (8 - entry->size % 8) % 8);
    }
    clear_padding(entry, block);
    int status = pack_call(entry, args, shapes, ptrs, block);
    if (status > 0)
        result = launcher_slow(self, grid, args, n);
    else if (status == 0)
        result = launch_block(entry, grid, block, slot_ptrs);
done:
    Py_XDECREF(key);
    Py_XDECREF(entry);
    PyMem_Free(heap);
    if (shapes != shapes_small) {
        PyMem_Free(shapes);
        PyMem_Free(ptrs);
    }
    return result;
}

/* Launcher(spec_kinds: bytes, fast: dict, slow: callable) */
static int launcher_init(Launcher *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec_kinds", "fast", "slow", NULL};
    Py_buffer spec;
    PyObject *fast, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*O!O", names, &spec, &PyDict_Type, &fast, &slow))
        return -1;
    int status = -1;
    if (self->spec_kinds != NULL) {
        PyErr_SetString(PyExc_TypeError, "Launcher is already initialised");
        goto done;
    }
    self->spec_kinds = PyMem_Malloc((size_t)(spec.len ? spec.len : 1));
    if (self->spec_kinds == NULL) { PyErr_NoMemory(); goto done; }
    self->nargs = spec.len;
    self->keylen = 0;
    for (Py_ssize_t i = 0; i < spec.len; i++) {
        char kind = ((const char *)spec.buf)[i];
        if (kind != SPEC_GL && kind != SPEC_CONSTEXPR && kind != SPEC_SCALAR) {
            PyErr_Format(PyExc_ValueError, "spec kind %d of argument %zd is not one of 0 (gl), 1 (constexpr), 2 (scalar)",
                         kind, i);
            goto done;
        }
        self->spec_kinds[i] = kind;
        self->keylen += kind == SPEC_GL ? 4 : 1;
    }
    Py_INCREF(fast); self->fast = fast;
    Py_INCREF(slow); self->slow = slow;
    self->vectorcall = (vectorcallfunc)launcher_vectorcall;
    status = 0;
done:
    PyBuffer_Release(&spec);
    return status;
}

static PyObject *launcher_key_method(Launcher *self, PyObject *args)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nargs) {
        PyErr_Format(PyExc_TypeError, "key takes a tuple of %zd arguments", self->nargs);
        return NULL;
    }
    PyObject *small[16];
    PyObject **shapes = self->nargs > 16 ? PyMem_Malloc((size_t)self->nargs * sizeof(PyObject *)) : small;
    if (shapes == NULL)
        return PyErr_NoMemory();
    PyObject *key = launcher_key(self, &PyTuple_GET_ITEM(args, 0), shapes);
    if (shapes != small)
        PyMem_Free(shapes);
    if (key == NULL && slow_error())
        Py_RETURN_NONE;
    return key;
}

static PyMethodDef launcher_methods[] = {
    {"key", (PyCFunction)launcher_key_method, METH_O, "The cache key of an argument tuple (None: the slow path's)."},
    {NULL}
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tkpy_native_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "One kernel's launch path: launcher(grid, *args).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)launcher_init,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_methods = launcher_methods,
};

/* ---- module ------------------------------------------------------------------------------------ */
static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tkpy_native_launch",
    .m_doc = "tkpy's native kernel launch path.",
    .m_size = -1,
};

static int add_names(PyObject *module, const char *attr, const char *const *names, int count)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
    for (int i = 0; i < count; i++) {
        PyObject *v = PyLong_FromLong(i);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    return PyModule_AddObject(module, attr, d) < 0 ? (Py_DECREF(d), -1) : 0;
}

PyMODINIT_FUNC PyInit_tkpy_native_launch(void)
{
    if (!(str_dtype = PyUnicode_InternFromString("dtype")) || !(str_shape = PyUnicode_InternFromString("shape"))
        || !(str_is_contiguous = PyUnicode_InternFromString("is_contiguous"))
        || !(str_get_device = PyUnicode_InternFromString("get_device"))
        || !(str_data_ptr = PyUnicode_InternFromString("data_ptr")))
        return NULL;
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&LauncherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0
        || PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0
        || add_names(m, "KINDS", KIND_NAMES, 7) < 0 || add_names(m, "SOURCES", SOURCE_NAMES, 4) < 0
        || PyModule_AddIntConstant(m, "SPEC_GL", SPEC_GL) < 0
        || PyModule_AddIntConstant(m, "SPEC_CONSTEXPR", SPEC_CONSTEXPR) < 0
        || PyModule_AddIntConstant(m, "SPEC_SCALAR", SPEC_SCALAR) < 0
        || PyModule_AddIntConstant(m, "ALIGNMENT", ALIGNMENT) < 0
        || PyModule_AddObject(m, "NOOP_LAUNCH", PyLong_FromVoidPtr((void *)(uintptr_t)noop_launch)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
