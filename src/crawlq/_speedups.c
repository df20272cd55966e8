/* crawlq._speedups: two small kernels on bytes, in C (optional: crawlq runs without).
 *
 * - blake2b_128(data): BLAKE2b (RFC 7693) with a 16-byte digest, the same bytes as
 *   hashlib.blake2b(data, digest_size=16).digest(); the default fingerprint of nearly
 *   every request (crawlq.policies.fingerprint.url_fingerprint) hashes a short URL, for
 *   which hashlib's object and keyword arguments cost more than the hash.
 * - FingerprintSet: a set of 16-byte keys in one open-addressing table, the memory
 *   store's exact seen-set (a third of the memory of a set of bytes objects).
 *
 * Neither knows crawlq's objects: the rules of a frontier (what add() accepts, a
 * request's payload, the stores' scheduling) have one definition each, in Python, and
 * the hot ones are compiled by mypyc from it (setup.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------- */
/* BLAKE2b (RFC 7693), unkeyed, 16-byte digest: hashlib.blake2b(data, digest_size=16) */

static const uint64_t b2b_iv[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
    0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
    0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL};

static const uint8_t b2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2B_G(a, b, c, d, x, y)          \
    do {                                 \
        v[a] = v[a] + v[b] + (x);        \
        v[d] = ROTR64(v[d] ^ v[a], 32);  \
        v[c] = v[c] + v[d];              \
        v[b] = ROTR64(v[b] ^ v[c], 24);  \
        v[a] = v[a] + v[b] + (y);        \
        v[d] = ROTR64(v[d] ^ v[a], 16);  \
        v[c] = v[c] + v[d];              \
        v[b] = ROTR64(v[b] ^ v[c], 63);  \
    } while (0)

static uint64_t load64(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static void b2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t v[16], m[16];
    int i;
    for (i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = b2b_iv[i];
    }
    v[12] ^= t; /* the high word of the 128-bit counter stays 0: inputs < 2^64 bytes */
    if (last) v[14] = ~v[14];
    for (i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (i = 0; i < 12; i++) {
        const uint8_t *s = b2b_sigma[i];
        B2B_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2B_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2B_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2B_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2B_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2B_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2B_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2B_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

static void blake2b_128(const uint8_t *data, size_t n, uint8_t out[16]) {
    uint64_t h[8];
    uint8_t block[128];
    uint64_t t = 0;
    int i;
    memcpy(h, b2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ 16; /* fanout 1, depth 1, no key, 16-byte digest */
    while (n > 128) {
        t += 128;
        b2b_compress(h, data, t, 0);
        data += 128;
        n -= 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, data, n);
    t += n;
    b2b_compress(h, block, t, 1);
    for (i = 0; i < 16; i++) out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

static PyObject *py_blake2b_128(PyObject *mod, PyObject *data) {
    Py_buffer view;
    uint8_t digest[16];
    (void)mod;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    blake2b_128((const uint8_t *)view.buf, (size_t)view.len, digest);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)digest, 16);
}

/* ---------------------------------------------------------------------------------- */
/* FingerprintSet: the memory store's exact seen-set                                   */
/*
 * A set of 16-byte fingerprints in one open-addressing table (16 bytes a slot and a
 * byte saying whether it is used, linear probing, at most 70% full): about 30 bytes per
 * fingerprint against ~90 for a set of bytes objects, and nothing for the garbage
 * collector to walk (the type is not tracked: it holds no references but `other`).
 * Keys of any other length or type go to `other`, an ordinary set made when first
 * needed. It answers `in`, add(), len() and iteration, all a store asks of its set.
 */

typedef struct {
    PyObject_HEAD
    uint8_t *keys; /* cap slots of 16 bytes */
    uint8_t *used; /* cap flags */
    Py_ssize_t cap, n; /* cap: a power of two, or 0 before the first add */
    PyObject *other; /* a set, or NULL */
} FingerprintSet;

static PyTypeObject FingerprintSetType;

static uint64_t fp_hash(const uint8_t *k) {
    /* The halves mixed (splitmix64's finalizer): a user's fingerprint need not be as
     * uniform as BLAKE2b's, and linear probing wants well spread slots. */
    uint64_t lo, hi, h;
    memcpy(&lo, k, 8);
    memcpy(&hi, k + 8, 8);
    h = lo ^ (hi * 0x9E3779B97F4A7C15ULL);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

/* The slot of k: where it is, or the empty slot where it would go. */
static Py_ssize_t fp_slot(FingerprintSet *s, const uint8_t *k) {
    Py_ssize_t mask = s->cap - 1, i = (Py_ssize_t)(fp_hash(k) & (uint64_t)mask);
    while (s->used[i] && memcmp(s->keys + 16 * i, k, 16) != 0) i = (i + 1) & mask;
    return i;
}

static int fp_grow(FingerprintSet *s) {
    Py_ssize_t old = s->cap, cap = old ? old * 2 : 64, i;
    uint8_t *okeys = s->keys, *oused = s->used;
    if (cap > PY_SSIZE_T_MAX / 16) {
        PyErr_NoMemory();
        return -1;
    }
    s->keys = PyMem_Malloc((size_t)cap * 16);
    s->used = PyMem_Calloc((size_t)cap, 1);
    if (!s->keys || !s->used) {
        PyMem_Free(s->keys);
        PyMem_Free(s->used);
        s->keys = okeys;
        s->used = oused;
        PyErr_NoMemory();
        return -1;
    }
    s->cap = cap;
    for (i = 0; i < old; i++) {
        if (oused[i]) {
            Py_ssize_t j = fp_slot(s, okeys + 16 * i);
            memcpy(s->keys + 16 * j, okeys + 16 * i, 16);
            s->used[j] = 1;
        }
    }
    PyMem_Free(okeys);
    PyMem_Free(oused);
    return 0;
}

static int is_fp(PyObject *key) {
    return PyBytes_Check(key) && PyBytes_GET_SIZE(key) == 16;
}

/* key in s: 1, 0 or -1. */
static int fpset_contains(FingerprintSet *s, PyObject *key) {
    if (is_fp(key))
        return s->cap && s->used[fp_slot(s, (const uint8_t *)PyBytes_AS_STRING(key))];
    return s->other ? PySet_Contains(s->other, key) : (PyObject_Hash(key) == -1 ? -1 : 0);
}

/* s.add(key): 0 or -1. */
static int fpset_add(FingerprintSet *s, PyObject *key) {
    Py_ssize_t i;
    if (!is_fp(key)) {
        if (!s->other && !(s->other = PySet_New(NULL))) return -1;
        return PySet_Add(s->other, key);
    }
    if ((s->n + 1) * 10 > s->cap * 7 && fp_grow(s) < 0) return -1;
    i = fp_slot(s, (const uint8_t *)PyBytes_AS_STRING(key));
    if (!s->used[i]) {
        memcpy(s->keys + 16 * i, PyBytes_AS_STRING(key), 16);
        s->used[i] = 1;
        s->n++;
    }
    return 0;
}

static void fpset_dealloc(FingerprintSet *s) {
    PyMem_Free(s->keys);
    PyMem_Free(s->used);
    Py_XDECREF(s->other);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Py_ssize_t fpset_len(FingerprintSet *s) {
    return s->n + (s->other ? PySet_GET_SIZE(s->other) : 0);
}

static int fpset_sq_contains(FingerprintSet *s, PyObject *key) {
    return fpset_contains(s, key);
}

static PyObject *fpset_add_method(FingerprintSet *s, PyObject *key) {
    if (fpset_add(s, key) < 0) return NULL;
    Py_RETURN_NONE;
}

/* iter(s): over a list made now (the fingerprints, then the other keys). */
static PyObject *fpset_iter(FingerprintSet *s) {
    PyObject *all = PyList_New(0), *it;
    Py_ssize_t i;
    if (!all) return NULL;
    for (i = 0; i < s->cap; i++) {
        if (s->used[i]) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)s->keys + 16 * i, 16);
            if (!b || PyList_Append(all, b) < 0) {
                Py_XDECREF(b);
                Py_DECREF(all);
                return NULL;
            }
            Py_DECREF(b);
        }
    }
    if (s->other) {
        PyObject *o = PyObject_GetIter(s->other), *k;
        if (!o) {
            Py_DECREF(all);
            return NULL;
        }
        while ((k = PyIter_Next(o))) {
            int r = PyList_Append(all, k);
            Py_DECREF(k);
            if (r < 0) break;
        }
        Py_DECREF(o);
        if (PyErr_Occurred()) {
            Py_DECREF(all);
            return NULL;
        }
    }
    it = PyObject_GetIter(all);
    Py_DECREF(all);
    return it;
}

static PySequenceMethods fpset_as_sequence = {
    .sq_length = (lenfunc)fpset_len,
    .sq_contains = (objobjproc)fpset_sq_contains,
};

static PyMethodDef fpset_methods[] = {
    {"add", (PyCFunction)fpset_add_method, METH_O, "add(key): add a fingerprint"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject FingerprintSetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crawlq._speedups.FingerprintSet",
    .tp_basicsize = sizeof(FingerprintSet),
    .tp_dealloc = (destructor)fpset_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("FingerprintSet(): a set of 16-byte fingerprints (other keys in an "
                        "ordinary set beside), for the memory store's exact seen-set."),
    .tp_as_sequence = &fpset_as_sequence,
    .tp_iter = (getiterfunc)fpset_iter,
    .tp_methods = fpset_methods,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"blake2b_128", py_blake2b_128, METH_O,
     "blake2b_128(data) -> hashlib.blake2b(data, digest_size=16).digest()"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "crawlq._speedups",
                                       "BLAKE2b-128 and a set of fingerprints in C (optional).", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    /* (readies the type and adds it under the last part of its tp_name) */
    if (PyModule_AddType(m, &FingerprintSetType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
