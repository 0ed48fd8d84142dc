/* The C implementation of detectors/shinglecount.py: the same `count`, byte for byte.
 *
 * Contract: see the docstring of `count` in shinglecount.py. This file computes the same
 * CRC-32 (zlib's), the same 64-bit rolling hash (unsigned arithmetic wraps modulo 2**64,
 * as numpy's uint64 does in the Python version), and the same table and ring updates,
 * in the same order. Bad arguments raise TypeError or ValueError; nothing is written
 * outside the table's and the ring's buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BASE 0x100000001B3ULL
#define MIX 0x9E3779B97F4A7C15ULL
#define DROPPED 0xFFFF
#define GONE 0xFFFFFFFFU
#define FP_BITS 6
#define FP_MASK ((1 << FP_BITS) - 1)
#define TOP 3
#define SEP '\r'
/* Batches hold up to a block's tokens (about 256); longer ones take the heap. */
#define STACK_KEYS 512

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++) {
            c = (c & 1) ? (0xEDB88320U ^ (c >> 1)) : (c >> 1);
        }
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, Py_ssize_t len) {
    uint32_t c = 0xFFFFFFFFU;
    for (Py_ssize_t i = 0; i < len; i++) {
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFU;
}

/* `place` of shinglecount.py: where the sighting went (or DROPPED), and its count before. */
static long place(unsigned char *table, long slot, int want, int *seen) {
    int b = table[slot];
    int d = b - want;
    if (!(0 < d && d <= TOP)) {
        long alt = slot ^ 1;
        int b2 = table[alt];
        int d2 = b2 - want;
        if (0 < d2 && d2 <= TOP) {
            slot = alt;
            b = b2;
        } else if (!b) {
            table[slot] = (unsigned char)(want + 1);
            *seen = 0;
            return slot;
        } else if (!b2) {
            table[alt] = (unsigned char)(want + 1);
            *seen = 0;
            return alt;
        } else {
            *seen = 0;
            return DROPPED;
        }
    }
    int c = b - want;
    *seen = c;
    if (c == TOP) {
        return DROPPED;
    }
    table[slot] = (unsigned char)(b + 1);
    return slot;
}

static PyObject *count(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "count() takes exactly 8 arguments");
        return NULL;
    }
    PyObject *table_obj = args[0], *ring_obj = args[1], *last = args[2], *joined = args[3];
    if (!PyByteArray_Check(table_obj) || !PyList_Check(last) || !PyBytes_Check(joined)) {
        PyErr_SetString(PyExc_TypeError, "count(table: bytearray, ring, last: list, joined: bytes, ...)");
        return NULL;
    }
    Py_ssize_t warm = PyLong_AsSsize_t(args[4]);
    Py_ssize_t maxbits = PyLong_AsSsize_t(args[5]);
    Py_ssize_t bits = PyLong_AsSsize_t(args[6]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t k = PyList_GET_SIZE(last) + 1;
    if (maxbits < 2 || maxbits > 24 || bits < 0 || bits > maxbits || pos < 0 || k < 1 || k > 64) {
        PyErr_SetString(PyExc_ValueError, "count(): maxbits, bits, pos or k out of range");
        return NULL;
    }
    if (PyByteArray_GET_SIZE(table_obj) != ((Py_ssize_t)1 << bits)) {
        PyErr_SetString(PyExc_ValueError, "count(): the table is not 2**bits bytes");
        return NULL;
    }
    Py_ssize_t less = maxbits - bits;
    Py_buffer ring;
    if (PyObject_GetBuffer(ring_obj, &ring, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    uint64_t stack_window[STACK_KEYS + 64];
    uint64_t *window = stack_window;
    unsigned char stack_counts[STACK_KEYS];
    unsigned char *counts = stack_counts;

    if (ring.itemsize != (less ? 4 : 2)) {
        PyErr_SetString(PyExc_ValueError, "count(): the ring's entries are not 4 bytes while "
                                          "the table grows, 2 once full-size");
        goto done;
    }
    const char *text = PyBytes_AS_STRING(joined);
    Py_ssize_t len = PyBytes_GET_SIZE(joined);
    Py_ssize_t n = 1;
    for (Py_ssize_t i = 0; i < len; i++) {
        n += text[i] == SEP;
    }
    if (n > STACK_KEYS) {
        window = PyMem_Malloc(sizeof(uint64_t) * (size_t)(n + k));
        counts = PyMem_Malloc((size_t)n);
        if (window == NULL || counts == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* The window: the k - 1 hashes before the batch, then the batch's. */
    for (Py_ssize_t t = 0; t < k - 1; t++) {
        window[t] = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(last, t));
    }
    if (PyErr_Occurred()) {
        goto done;
    }
    Py_ssize_t w = k - 1;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= len; i++) {
        if (i == len || text[i] == SEP) {
            window[w++] = crc32_of((const unsigned char *)text + start, i - start);
            start = i + 1;
        }
    }
    Py_ssize_t first = warm > 0 ? warm : 0;
    Py_ssize_t shingles = n > first ? n - first : 0;
    Py_ssize_t hist = (Py_ssize_t)1 << (maxbits - 1);
    Py_ssize_t entries = ring.len / ring.itemsize;
    /* Entries are written from pos on, wrapping at hist only in a ring of hist entries. */
    int wraps = !less && entries == hist;
    if (shingles && (wraps ? pos >= entries : pos + shingles > entries)) {
        PyErr_SetString(PyExc_ValueError, "count(): the ring has no room for the batch");
        goto done;
    }
    uint64_t weights[64];
    uint64_t power = 1;
    for (Py_ssize_t t = k - 1; t >= 0; t--) {
        weights[t] = MIX * power;
        power *= BASE;
    }
    unsigned char *table = (unsigned char *)PyByteArray_AS_STRING(table_obj);
    int shift = 64 - (int)maxbits - FP_BITS;
    int slot_shift = FP_BITS + (int)less;
    Py_ssize_t wrap = hist - 1;
    Py_ssize_t ncounts = 0;
    uint32_t *ring32 = (uint32_t *)ring.buf;
    uint16_t *ring16 = (uint16_t *)ring.buf;
    for (Py_ssize_t i = first; i < n; i++) {
        uint64_t rolling = 0;
        for (Py_ssize_t t = 0; t < k; t++) {
            rolling += window[i + t] * weights[t];
        }
        uint64_t full = rolling >> shift;
        long slot = (long)(full >> slot_shift);
        int want = (int)(full & FP_MASK) << 2;
        int b = table[slot];
        if (!b && !table[slot ^ 1]) {
            table[slot] = (unsigned char)(want + 1);
        } else if (0 < b - want && b - want < TOP) {
            table[slot] = (unsigned char)(b + 1);
            counts[ncounts++] = (unsigned char)(b - want);
        } else {
            int c;
            slot = place(table, slot, want, &c);
            if (c) {
                counts[ncounts++] = (unsigned char)c;
            }
        }
        if (less) {
            ring32[pos] = slot != DROPPED ? (uint32_t)full : GONE;
            pos += 1;
        } else {
            long o = ring16[pos];
            ring16[pos] = (uint16_t)slot;
            pos = (pos + 1) & wrap;
            if (o != DROPPED) {
                int e = table[o] - 1;
                table[o] = (unsigned char)((e & 3) ? e : 0);
            }
        }
    }
    /* `last` takes the batch's last k - 1 hashes. */
    for (Py_ssize_t t = 0; t < k - 1; t++) {
        PyObject *h = PyLong_FromUnsignedLongLong(window[n + t]);
        if (h == NULL) {
            goto done;
        }
        PyObject *old = PyList_GET_ITEM(last, t);
        PyList_SET_ITEM(last, t, h);
        Py_DECREF(old);
    }
    PyObject *out = PyByteArray_FromStringAndSize((const char *)counts, ncounts);
    if (out == NULL) {
        goto done;
    }
    result = Py_BuildValue("(Nn)", out, pos);

done:
    if (window != stack_window) {
        PyMem_Free(window);
    }
    if (counts != stack_counts) {
        PyMem_Free(counts);
    }
    PyBuffer_Release(&ring);
    return result;
}

static PyObject *place_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "place(table: bytearray, slot: int, want: int)");
        return NULL;
    }
    Py_ssize_t slot = PyLong_AsSsize_t(args[1]);
    Py_ssize_t want = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t size = PyByteArray_GET_SIZE(args[0]);
    if (slot < 0 || (slot | 1) >= size || want < 0 || want > 255 - TOP) {
        PyErr_SetString(PyExc_ValueError, "place(): slot or want out of range");
        return NULL;
    }
    int c;
    long at = place((unsigned char *)PyByteArray_AS_STRING(args[0]), (long)slot, (int)want, &c);
    return Py_BuildValue("(li)", at, c);
}

static PyMethodDef methods[] = {
    {"place", (PyCFunction)(void (*)(void))place_py, METH_FASTCALL,
     "place(table, slot, want) -> (slot, seen): see detectors/shinglecount.py."},
    {"count", (PyCFunction)(void (*)(void))count, METH_FASTCALL,
     "count(table, ring, last, joined, warm, maxbits, bits, pos) -> (counts, pos): "
     "see detectors/shinglecount.py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "detectors.shinglecount",
    "The C implementation of detectors/shinglecount.py's count (see that module).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_shinglecount(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    /* The constants the Python side imports from the module it finds. */
    if (PyModule_AddObject(m, "BASE", PyLong_FromUnsignedLongLong(BASE)) < 0 ||
        PyModule_AddObject(m, "MIX", PyLong_FromUnsignedLongLong(MIX)) < 0 ||
        PyModule_AddIntConstant(m, "DROPPED", DROPPED) < 0 ||
        PyModule_AddObject(m, "GONE", PyLong_FromUnsignedLong(GONE)) < 0 ||
        PyModule_AddIntConstant(m, "FP_BITS", FP_BITS) < 0 ||
        PyModule_AddIntConstant(m, "FP_MASK", FP_MASK) < 0 ||
        PyModule_AddIntConstant(m, "TOP", TOP) < 0 ||
        PyModule_AddStringConstant(m, "SEP", "\r") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
