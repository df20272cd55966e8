/* crawlq._speedups: the common case of Frontier.add in C.
 *
 * Frontier.add turns each offered request into a store entry: canonical URL and host
 * key, 128-bit BLAKE2b fingerprint, msgpack payload. The canonical URL and host key
 * come from the one Python definition (crawlq.policies.canonical, called from here);
 * this file builds the rest of the entry of a plain request: a GET without body,
 * meta, not_before, retries or dont_filter, whose URL is ASCII. Anything else is
 * handed, in order, to the Python code that owns the rules (crawlq.models,
 * crawlq.frontier). tests/test_speedups.py checks that both give the same entries.
 *
 * Also here: Frontier.next's Lease objects (LeaseMaker) and the memory store's add,
 * lease and release loops (MemoryLoops), each the C twin of a Python definition that
 * stays the fallback. (The SQLite store's per-row rules are compiled from their Python
 * definition by mypyc instead: crawlq/stores/sqlite_rows.py.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
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

/* ---------------------------------------------------------------------------------- */
/* The dataclasses' fields, read and filled in directly through their slots            */

#define N_REQ 12 /* Request's fields, in order */
#define N_LEASE 5
static const char *req_fields[N_REQ] = {"url", "method", "body", "priority", "depth",
                                        "referrer", "meta", "dont_filter", "not_before",
                                        "retries", "revisit_after", "queue"};
static const char *lease_fields[N_LEASE] = {"token", "request", "queue", "leased_at",
                                            "expires_at"};

/* The offsets of a slots class's fields: filled in directly, as its __init__ would.
 * (Names interned: the type lookup cache keeps the name objects it saw, so fresh ones
 * from each call would pile up there, up to its size.) */
static int slot_offsets(PyTypeObject *t, const char **names, int n, Py_ssize_t *off) {
    int k;
    for (k = 0; k < n; k++) {
        PyObject *name = PyUnicode_InternFromString(names[k]), *d;
        if (!name) return -1;
        d = PyObject_GetAttr((PyObject *)t, name);
        Py_DECREF(name);
        if (!d) return -1;
        if (Py_TYPE(d) != &PyMemberDescr_Type ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            Py_DECREF(d);
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", t->tp_name, names[k]);
            return -1;
        }
        off[k] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
    }
    return 0;
}

typedef struct {
    PyObject_HEAD
    PyObject *split;    /* the Python canonicalizer: url -> (canonical url, host key) */
    PyObject *request_type;
    PyObject *no_meta;
    PyObject *keys;     /* dict: host key -> the one str object for it (shared by entries) */
    long long priority_max;
    Py_ssize_t off[N_REQ]; /* Request's slots, in req_fields order (read directly) */
} FastAdd;

/* ---------------------------------------------------------------------------------- */
/* msgpack, the forms Request.to_payload writes for a plain GET                         */

/* The header of a str of n bytes; returns its length. */
static Py_ssize_t mp_str_head(char *w, Py_ssize_t n) {
    Py_ssize_t h;
    if (n < 32) {
        w[0] = (char)(0xa0 | n);
        h = 1;
    } else if (n < 256) {
        w[0] = (char)0xd9;
        w[1] = (char)n;
        h = 2;
    } else if (n < 65536) {
        w[0] = (char)0xda;
        w[1] = (char)(n >> 8);
        w[2] = (char)n;
        h = 3;
    } else {
        w[0] = (char)0xdb;
        w[1] = (char)(n >> 24);
        w[2] = (char)(n >> 16);
        w[3] = (char)(n >> 8);
        w[4] = (char)n;
        h = 5;
    }
    return h;
}

static Py_ssize_t mp_str(char *w, const char *s, Py_ssize_t n) {
    Py_ssize_t h = mp_str_head(w, n);
    memcpy(w + h, s, n);
    return h + n;
}

static Py_ssize_t mp_uint(char *w, unsigned long long v) {
    if (v < 128) {
        w[0] = (char)v;
        return 1;
    }
    if (v < 256) {
        w[0] = (char)0xcc;
        w[1] = (char)v;
        return 2;
    }
    if (v < 65536) {
        w[0] = (char)0xcd;
        w[1] = (char)(v >> 8);
        w[2] = (char)v;
        return 3;
    }
    w[0] = (char)0xce;
    w[1] = (char)(v >> 24);
    w[2] = (char)(v >> 16);
    w[3] = (char)(v >> 8);
    w[4] = (char)v;
    return 5;
}

/* Request.to_payload(key) for a plain GET. url/ref are ASCII; ref may be NULL. */
static PyObject *payload(const char *u, Py_ssize_t un, const char *k, Py_ssize_t kn,
                         unsigned long long depth, const char *r, Py_ssize_t rn) {
    char small[512], *buf = small, *w;
    int version = 1;
    Py_ssize_t base = 0, need = un + rn + 32;
    PyObject *res;
    if (un > 8 + kn && !memcmp(u, "https://", 8) && !memcmp(u + 8, k, kn) &&
        (u[8 + kn] == '/' || u[8 + kn] == ':')) {
        version = 2;
        base = 8 + kn;
    } else if (un > 7 + kn && !memcmp(u, "http://", 7) && !memcmp(u + 7, k, kn) &&
               (u[7 + kn] == '/' || u[7 + kn] == ':')) {
        version = 3;
        base = 7 + kn;
    }
    if (need > (Py_ssize_t)sizeof small) {
        buf = PyMem_Malloc(need);
        if (!buf) return PyErr_NoMemory();
    }
    w = buf;
    *w++ = (char)(0x90 | (r ? 4 : depth ? 3 : 2));
    *w++ = (char)version;
    w += mp_str(w, u + base, un - base);
    if (r || depth) w += mp_uint(w, depth);
    if (r) {
        if (version != 1 && rn > base && !memcmp(r, u, base) && (r[base] == '/' || r[base] == ':')) {
            w += mp_str(w, r + base, rn - base);
        } else if (version != 1 && rn > 0 && (r[0] == '/' || r[0] == ':' || r[0] == '!')) {
            /* "!" + ref: a referrer that would read as relative is marked */
            w += mp_str_head(w, rn + 1);
            *w++ = '!';
            memcpy(w, r, rn);
            w += rn;
        } else {
            w += mp_str(w, r, rn);
        }
    }
    res = PyBytes_FromStringAndSize(buf, w - buf);
    if (buf != small) PyMem_Free(buf);
    return res;
}

/* ---------------------------------------------------------------------------------- */
/* FastAdd                                                                              */

static PyObject *s_GET, *zero;

static void fastadd_dealloc(FastAdd *self) {
    Py_XDECREF(self->split);
    Py_XDECREF(self->request_type);
    Py_XDECREF(self->no_meta);
    Py_XDECREF(self->keys);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int fastadd_init(FastAdd *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"request_type", "no_meta", "split", "priority_max", NULL};
    PyObject *rt, *nm, *split;
    long long pmax;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOL", kwlist, &rt, &nm, &split, &pmax))
        return -1;
    if (!PyType_Check(rt)) {
        PyErr_SetString(PyExc_TypeError, "request_type must be a class");
        return -1;
    }
    if (!PyCallable_Check(split)) {
        PyErr_SetString(PyExc_TypeError, "split must be callable");
        return -1;
    }
    if (slot_offsets((PyTypeObject *)rt, req_fields, N_REQ, self->off) < 0) return -1;
    Py_INCREF(rt);
    Py_XSETREF(self->request_type, rt);
    Py_INCREF(nm);
    Py_XSETREF(self->no_meta, nm);
    Py_INCREF(split);
    Py_XSETREF(self->split, split);
    Py_XSETREF(self->keys, PyDict_New());
    if (!self->keys) return -1;
    self->priority_max = pmax;
    return 0;
}

/* Borrowed value of slot k of a Request (NULL when unset: the Python path explains). */
#define SLOT(item, k) (*(PyObject **)((char *)(item) + self->off[k]))

/* The host key as a str shared by every entry of that host (less memory per URL). */
static PyObject *key_object(FastAdd *self, const char *k, Py_ssize_t kn) {
    PyObject *s = PyUnicode_FromStringAndSize(k, kn), *shared;
    if (!s) return NULL;
    if (PyDict_GET_SIZE(self->keys) >= 50000) PyDict_Clear(self->keys);
    shared = PyDict_SetDefault(self->keys, s, s);
    if (!shared) {
        Py_DECREF(s);
        return NULL;
    }
    Py_INCREF(shared);
    Py_DECREF(s);
    return shared;
}

/* The entry of a plain request, Py_None when it is not plain, NULL on error. */
static PyObject *plain_entry(FastAdd *self, PyObject *item, PyObject *revisit_at) {
    PyObject *url, *prio = NULL, *ref = Py_None, *key, *fp, *pl, *entry, *parts;
    unsigned long long depth = 0;
    const char *u, *r = NULL, *c, *k;
    Py_ssize_t un, rn = 0, cn, kn;
    uint8_t digest[16];
    if (PyUnicode_CheckExact(item)) {
        url = item;
        prio = zero;
    } else if ((PyObject *)Py_TYPE(item) == self->request_type) {
        PyObject *v;
        if (!(url = SLOT(item, 0)) || !PyUnicode_CheckExact(url)) goto notplain;
        if (!(v = SLOT(item, 1)) || (v != s_GET && !(PyUnicode_CheckExact(v) &&
                                                    PyUnicode_Compare(v, s_GET) == 0)))
            goto notplain;
        if (!(v = SLOT(item, 2)) || !PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v))
            goto notplain;
        if (!(v = SLOT(item, 7)) || v != Py_False) goto notplain;
        if (!(v = SLOT(item, 9)) || !PyLong_CheckExact(v) || PyObject_IsTrue(v))
            goto notplain;
        if (!(v = SLOT(item, 8)) || v != Py_None) goto notplain;
        if (!(v = SLOT(item, 10)) || v != Py_None) goto notplain;
        if (!(v = SLOT(item, 11)) || v != Py_None) goto notplain;
        if (!(v = SLOT(item, 6)) || (v != self->no_meta && PyObject_Length(v) != 0))
            goto notplain;
        if (!(prio = SLOT(item, 3)) || !PyLong_CheckExact(prio)) goto notplain;
        {
            int overflow;
            long long p = PyLong_AsLongLongAndOverflow(prio, &overflow);
            if (overflow || p > self->priority_max || p < -self->priority_max) goto notplain;
        }
        if (!(v = SLOT(item, 4)) || !PyLong_CheckExact(v)) goto notplain;
        depth = PyLong_AsUnsignedLongLong(v);
        if (PyErr_Occurred() || depth > 0xffffffffULL) goto notplain;
        if (!(ref = SLOT(item, 5))) goto notplain;
        if (ref != Py_None) {
            if (!PyUnicode_CheckExact(ref) || !PyUnicode_IS_ASCII(ref)) goto notplain;
            r = PyUnicode_AsUTF8AndSize(ref, &rn);
        }
    } else {
        Py_RETURN_NONE;
    }
    if (!PyUnicode_IS_ASCII(url)) Py_RETURN_NONE;
    u = PyUnicode_AsUTF8AndSize(url, &un);
    /* The one definition of canonical (Python); a URL it refuses goes to the Python
     * path, which records the reason. */
    parts = PyObject_CallOneArg(self->split, url);
    if (!parts) goto notplain;
    if (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(parts, 0)) ||
        !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(parts, 1))) {
        Py_DECREF(parts);
        Py_RETURN_NONE;
    }
    c = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(parts, 0), &cn);
    k = c ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(parts, 1), &kn) : NULL;
    if (!k) {
        Py_DECREF(parts);
        goto notplain;
    }
    blake2b_128((const uint8_t *)c, (size_t)cn, digest);
    key = key_object(self, k, kn);
    pl = key ? payload(u, un, k, kn, depth, r, rn) : NULL;
    Py_DECREF(parts);
    fp = pl ? PyBytes_FromStringAndSize((const char *)digest, 16) : NULL;
    if (!fp) {
        Py_XDECREF(key);
        Py_XDECREF(pl);
        return NULL;
    }
    entry = PyTuple_New(7);
    if (!entry) {
        Py_DECREF(key);
        Py_DECREF(pl);
        Py_DECREF(fp);
        return NULL;
    }
    Py_INCREF(prio);
    Py_INCREF(Py_None);
    Py_INCREF(revisit_at);
    Py_INCREF(zero);
    PyTuple_SET_ITEM(entry, 0, fp);
    PyTuple_SET_ITEM(entry, 1, key);
    PyTuple_SET_ITEM(entry, 2, prio);
    PyTuple_SET_ITEM(entry, 3, pl);
    PyTuple_SET_ITEM(entry, 4, Py_None);
    PyTuple_SET_ITEM(entry, 5, revisit_at);
    PyTuple_SET_ITEM(entry, 6, zero);
    return entry;
notplain:
    /* a missing attribute or odd value: the Python path explains it */
    PyErr_Clear();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(prepare_doc,
"prepare(requests, start, end, revisit_at, slow, entries, index)\n--\n\n"
"Append the store entry of each of requests[start:end] to entries and its position\n"
"to index. Plain requests are done here; for any other, slow(i, request) is called\n"
"and its result (an entry, or None when it rejected the request) is used.");

static PyObject *fastadd_prepare(FastAdd *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *requests, *revisit_at, *slow, *entries, *index;
    Py_ssize_t start, end, i;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "prepare() takes 7 arguments");
        return NULL;
    }
    requests = args[0];
    revisit_at = args[3];
    slow = args[4];
    entries = args[5];
    index = args[6];
    start = PyLong_AsSsize_t(args[1]);
    end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "prepare() needs start >= 0");
        return NULL;
    }
    if (!PyList_CheckExact(entries) || !PyList_CheckExact(index) ||
        !(PyList_CheckExact(requests) || PyTuple_CheckExact(requests))) {
        PyErr_SetString(PyExc_TypeError, "prepare() needs a list or tuple and two lists");
        return NULL;
    }
    for (i = start; i < end && i < PySequence_Fast_GET_SIZE(requests); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(requests, i), *e, *pos;
        Py_INCREF(item); /* slow() may run user code that changes the list */
        e = plain_entry(self, item, revisit_at);
        if (e == Py_None) {
            Py_DECREF(e);
            pos = PyLong_FromSsize_t(i);
            e = pos ? PyObject_CallFunctionObjArgs(slow, pos, item, NULL) : NULL;
            Py_XDECREF(pos);
        }
        Py_DECREF(item);
        if (!e) return NULL;
        if (e != Py_None) {
            int bad = PyList_Append(entries, e);
            pos = bad ? NULL : PyLong_FromSsize_t(i);
            bad = bad || !pos || PyList_Append(index, pos);
            Py_XDECREF(pos);
            if (bad) {
                Py_DECREF(e);
                return NULL;
            }
        }
        Py_DECREF(e);
    }
    Py_RETURN_NONE;
}

static PyMethodDef fastadd_methods[] = {
    {"prepare", (PyCFunction)(void (*)(void))fastadd_prepare, METH_FASTCALL, prepare_doc},
    {NULL, NULL, 0, NULL}};

static PyTypeObject FastAddType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crawlq._speedups.FastAdd",
    .tp_basicsize = sizeof(FastAdd),
    .tp_dealloc = (destructor)fastadd_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("FastAdd(request_type, no_meta, split, priority_max): Frontier.add's "
                        "plain case in C, with split (the canonicalizer) called for each URL."),
    .tp_methods = fastadd_methods,
    .tp_init = (initproc)fastadd_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------------------------- */
/* Leases: Frontier.next's rows -> Lease(token, Request.from_payload(...), queue, ...)  */


typedef struct {
    PyObject_HEAD
    PyTypeObject *request_type, *lease_type;
    PyObject *no_meta, *from_payload, *empty_bytes;
    Py_ssize_t req_off[N_REQ], lease_off[N_LEASE];
} LeaseMaker;

static void leasemaker_dealloc(LeaseMaker *self) {
    Py_XDECREF(self->request_type);
    Py_XDECREF(self->lease_type);
    Py_XDECREF(self->no_meta);
    Py_XDECREF(self->from_payload);
    Py_XDECREF(self->empty_bytes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int leasemaker_init(LeaseMaker *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"request_type", "lease_type", "no_meta", "from_payload", NULL};
    PyObject *rt, *lt, *nm, *fp;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!OO", kwlist, &PyType_Type, &rt,
                                     &PyType_Type, &lt, &nm, &fp))
        return -1;
    if (slot_offsets((PyTypeObject *)rt, req_fields, N_REQ, self->req_off) < 0 ||
        slot_offsets((PyTypeObject *)lt, lease_fields, N_LEASE, self->lease_off) < 0)
        return -1;
    Py_INCREF(rt);
    Py_XSETREF(self->request_type, (PyTypeObject *)rt);
    Py_INCREF(lt);
    Py_XSETREF(self->lease_type, (PyTypeObject *)lt);
    Py_INCREF(nm);
    Py_XSETREF(self->no_meta, nm);
    Py_INCREF(fp);
    Py_XSETREF(self->from_payload, fp);
    Py_XSETREF(self->empty_bytes, PyBytes_FromStringAndSize("", 0));
    return self->empty_bytes ? 0 : -1;
}

/* Read a msgpack str at *p (< end): sets *s, *n and advances *p; 0 if not a str. */
static int mp_read_str(const unsigned char **p, const unsigned char *end, const char **s,
                       Py_ssize_t *n) {
    const unsigned char *q = *p;
    Py_ssize_t len;
    if (q >= end) return 0;
    if ((q[0] & 0xe0) == 0xa0) {
        len = q[0] & 0x1f;
        q += 1;
    } else if (q[0] == 0xd9 && end - q >= 2) {
        len = q[1];
        q += 2;
    } else if (q[0] == 0xda && end - q >= 3) {
        len = ((Py_ssize_t)q[1] << 8) | q[2];
        q += 3;
    } else if (q[0] == 0xdb && end - q >= 5) {
        len = ((Py_ssize_t)q[1] << 24) | ((Py_ssize_t)q[2] << 16) | ((Py_ssize_t)q[3] << 8) | q[4];
        q += 5;
    } else {
        return 0;
    }
    if (end - q < len) return 0;
    *s = (const char *)q;
    *n = len;
    *p = q + len;
    return 1;
}

static int mp_read_uint(const unsigned char **p, const unsigned char *end,
                        unsigned long long *v) {
    const unsigned char *q = *p;
    if (q >= end) return 0;
    if (q[0] < 0x80) {
        *v = q[0];
        *p = q + 1;
    } else if (q[0] == 0xcc && end - q >= 2) {
        *v = q[1];
        *p = q + 2;
    } else if (q[0] == 0xcd && end - q >= 3) {
        *v = ((unsigned)q[1] << 8) | q[2];
        *p = q + 3;
    } else if (q[0] == 0xce && end - q >= 5) {
        *v = ((unsigned long long)q[1] << 24) | ((unsigned long long)q[2] << 16) |
             ((unsigned long long)q[3] << 8) | q[4];
        *p = q + 5;
    } else {
        return 0;
    }
    return 1;
}

/* b1 + b2 + s as a new str; NULL with an error (e.g. bad UTF-8). */
static PyObject *joined(const char *b1, Py_ssize_t n1, const char *b2, Py_ssize_t n2,
                        const char *s, Py_ssize_t n) {
    char small[1024], *buf = small;
    PyObject *r;
    Py_ssize_t total = n1 + n2 + n;
    if (total > (Py_ssize_t)sizeof small && !(buf = PyMem_Malloc(total)))
        return PyErr_NoMemory();
    memcpy(buf, b1, n1);
    memcpy(buf + n1, b2, n2);
    memcpy(buf + n1 + n2, s, n);
    r = PyUnicode_DecodeUTF8(buf, total, NULL);
    if (buf != small) PyMem_Free(buf);
    return r;
}

/* Request.from_payload for the plain forms; Py_None when the payload is another form. */
static PyObject *plain_request(LeaseMaker *self, PyObject *payload, PyObject *prio,
                               PyObject *retries, PyObject *queue) {
    const unsigned char *p, *end;
    const char *u, *r = NULL, *k = NULL, *scheme = "";
    Py_ssize_t un, rn = 0, kn = 0, sn = 0;
    unsigned long long depth = 0;
    int n, version;
    PyObject *url, *ref = Py_None, *depth_obj, *obj, **slot;
    if (!PyBytes_CheckExact(payload)) Py_RETURN_NONE;
    p = (const unsigned char *)PyBytes_AS_STRING(payload);
    end = p + PyBytes_GET_SIZE(payload);
    if (end - p < 2 || p[0] < 0x92 || p[0] > 0x94 || p[1] < 1 || p[1] > 3) Py_RETURN_NONE;
    n = p[0] & 0x0f;
    version = p[1];
    p += 2;
    if (!mp_read_str(&p, end, &u, &un)) Py_RETURN_NONE;
    if (n >= 3 && !mp_read_uint(&p, end, &depth)) Py_RETURN_NONE;
    if (n == 4 && !mp_read_str(&p, end, &r, &rn)) Py_RETURN_NONE;
    if (p != end) Py_RETURN_NONE;
    if (version != 1) {
        if (!PyUnicode_CheckExact(queue) || !PyUnicode_IS_ASCII(queue)) Py_RETURN_NONE;
        k = PyUnicode_AsUTF8AndSize(queue, &kn);
        scheme = version == 2 ? "https://" : "http://";
        sn = version == 2 ? 8 : 7;
    }
    url = version == 1 ? PyUnicode_DecodeUTF8(u, un, NULL) : joined(scheme, sn, k, kn, u, un);
    if (!url) goto decode_error;
    if (r) {
        if (version != 1 && rn > 0 && r[0] == '!')
            ref = PyUnicode_DecodeUTF8(r + 1, rn - 1, NULL);
        else if (version != 1 && rn > 0 && (r[0] == '/' || r[0] == ':'))
            ref = joined(scheme, sn, k, kn, r, rn);
        else
            ref = PyUnicode_DecodeUTF8(r, rn, NULL);
        if (!ref) {
            Py_DECREF(url);
            goto decode_error;
        }
    } else {
        Py_INCREF(Py_None);
    }
    depth_obj = PyLong_FromUnsignedLongLong(depth);
    obj = depth_obj ? self->request_type->tp_alloc(self->request_type, 0) : NULL;
    if (!obj) {
        Py_DECREF(url);
        Py_DECREF(ref);
        Py_XDECREF(depth_obj);
        return NULL;
    }
#define SET(off, v) (slot = (PyObject **)((char *)obj + (off)), *slot = (v))
    SET(self->req_off[0], url);
    Py_INCREF(s_GET);
    SET(self->req_off[1], s_GET);
    Py_INCREF(self->empty_bytes);
    SET(self->req_off[2], self->empty_bytes);
    Py_INCREF(prio);
    SET(self->req_off[3], prio);
    SET(self->req_off[4], depth_obj);
    SET(self->req_off[5], ref);
    Py_INCREF(self->no_meta);
    SET(self->req_off[6], self->no_meta);
    Py_INCREF(Py_False);
    SET(self->req_off[7], Py_False);
    Py_INCREF(Py_None);
    SET(self->req_off[8], Py_None);
    Py_INCREF(retries);
    SET(self->req_off[9], retries);
    Py_INCREF(Py_None);
    SET(self->req_off[10], Py_None);
    Py_INCREF(Py_None);
    SET(self->req_off[11], Py_None);
    return obj;
decode_error:
    PyErr_Clear(); /* from_payload says what is wrong with it */
    Py_RETURN_NONE;
}

PyDoc_STRVAR(leases_doc,
"leases(rows, now) -> list of Lease\n--\n\n"
"Frontier.next's leases from a store's rows (token, queue, priority, retries,\n"
"payload, expires_at). Plain payloads are decoded here, others by from_payload.");

static PyObject *leasemaker_leases(LeaseMaker *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *rows, *now, *out;
    Py_ssize_t i, n;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "leases() takes 2 arguments");
        return NULL;
    }
    rows = args[0];
    now = args[1];
    if (!PyList_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows must be a list");
        return NULL;
    }
    n = PyList_GET_SIZE(rows);
    out = PyList_New(n);
    if (!out) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *row, *req, *lease, **slot, **f;
        PyObject *token, *queue, *prio, *retries, *payload, *expires;
        /* a tuple from crawlq's stores; any 6-item sequence from another store */
        row = PySequence_Fast(PyList_GET_ITEM(rows, i), "a lease row must be a sequence");
        if (!row) goto fail;
        if (PySequence_Fast_GET_SIZE(row) != 6) {
            Py_DECREF(row);
            PyErr_SetString(PyExc_TypeError, "a lease row must have 6 items");
            goto fail;
        }
        f = PySequence_Fast_ITEMS(row);
        token = f[0];
        queue = f[1];
        prio = f[2];
        retries = f[3];
        payload = f[4];
        expires = f[5];
        req = plain_request(self, payload, prio, retries, queue);
        if (req == Py_None) {
            Py_DECREF(req);
            req = PyObject_CallFunctionObjArgs(self->from_payload, payload, prio, retries,
                                               Py_None, queue, NULL);
        }
        if (!req) {
            Py_DECREF(row);
            goto fail;
        }
        lease = self->lease_type->tp_alloc(self->lease_type, 0);
        if (!lease) {
            Py_DECREF(req);
            Py_DECREF(row);
            goto fail;
        }
        Py_INCREF(token);
        Py_INCREF(queue);
        Py_INCREF(now);
        Py_INCREF(expires);
        {
            PyObject *obj = lease;
            SET(self->lease_off[0], token);
            SET(self->lease_off[1], req);
            SET(self->lease_off[2], queue);
            SET(self->lease_off[3], now);
            SET(self->lease_off[4], expires);
        }
        Py_DECREF(row); /* the lease holds its own references */
        PyList_SET_ITEM(out, i, lease);
    }
    return out;
fail:
    /* items not yet set are NULL, which list dealloc skips */
    Py_DECREF(out);
    return NULL;
}
#undef SET

static PyMethodDef leasemaker_methods[] = {
    {"leases", (PyCFunction)(void (*)(void))leasemaker_leases, METH_FASTCALL, leases_doc},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LeaseMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crawlq._speedups.LeaseMaker",
    .tp_basicsize = sizeof(LeaseMaker),
    .tp_dealloc = (destructor)leasemaker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("LeaseMaker(request_type, lease_type, no_meta, from_payload): "
                        "Frontier.next's leases in C."),
    .tp_methods = leasemaker_methods,
    .tp_init = (initproc)leasemaker_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *s_concurrency, *s_session_budget, *s_session_rest, *s_delay;

/* obj as a long long / double; on failure *bad is set (with the exception). */
static long long as_ll(PyObject *o, int *bad) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) *bad = 1;
    return v;
}

static double as_double(PyObject *o, int *bad) {
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) *bad = 1;
    return v;
}

static double attr_double(PyObject *o, PyObject *name, int *bad) {
    PyObject *v = PyObject_GetAttr(o, name);
    double r;
    if (!v) {
        *bad = 1;
        return 0;
    }
    r = as_double(v, bad);
    Py_DECREF(v);
    return r;
}

/* ---------------------------------------------------------------------------------- */

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

/* ---------------------------------------------------------------------------------- */
/* The memory store's loops: _add_entries, _lease_rounds and release's, in C           */
/*
 * The same loops as crawlq.stores.memory's _add_entries (for an exact seen-set),
 * _lease_rounds and MemoryStore.release (for plain acknowledgements), and _settle for the
 * queues they change, which stay the definition and the fallback. The heaps change by
 * _heapq's own steps (its functions, or the same steps with a faster comparison for the
 * ready heap), so they come out identical; tests/test_speedups.py runs both on
 * generated store calls and compares the whole store after each. Counters and versions
 * are 64-bit ints here.
 */

#define N_QUEUE 11
static const char *queue_fields[N_QUEUE] = {"accepted", "heap", "inflight", "key", "policy",
                                            "ready_at", "session", "since", "state",
                                            "version", "created"};
enum { Q_ACCEPTED, Q_HEAP, Q_INFLIGHT, Q_KEY, Q_POLICY, Q_READY_AT, Q_SESSION, Q_SINCE,
       Q_STATE, Q_VERSION, Q_CREATED };

typedef struct {
    PyObject_HEAD
    PyTypeObject *queue_type;
    PyObject *added, *duplicate, *over_budget; /* add's verdicts */
    long long ack_done;
    long long prio_bias, st_ready, st_busy, st_resting, st_empty;
    Py_ssize_t off[N_QUEUE];
} MemoryLoops;

/* The policy values the loop reads, cached for the last policy object seen. */
typedef struct {
    PyObject *pol; /* strong reference, or NULL */
    long long concurrency, session_budget, max_queue_urls;
    double session_rest;
} LeasePolicy;

/* _heapq.heappush (for the resting and scheduled heaps) and struct.error: looked up once,
 * at import (a lookup per store would leave fresh name objects in the type lookup cache),
 * and used from here by every MemoryLoops. */
static PyObject *heappush_fn, *struct_error;

static PyObject *s_ready, *s_resting, *s_queues, *s_leases, *s_tokens, *s_max_queue_urls,
    *s_seen, *s_revisit, *s_scheduled, *s_ticket, *s_seq_n, *s_lifo, *s_queue;

static void memloops_dealloc(MemoryLoops *self) {
    Py_XDECREF(self->queue_type);
    Py_XDECREF(self->added);
    Py_XDECREF(self->duplicate);
    Py_XDECREF(self->over_budget);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int memloops_init(MemoryLoops *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"queue_type", "prio_bias", "states", "verdicts", "ack_done",
                             NULL};
    PyObject *qt, *added, *dup, *over;
    long long bias;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!L(LLLL)(OOO)L", kwlist, &PyType_Type, &qt,
                                     &bias, &self->st_ready, &self->st_busy,
                                     &self->st_resting, &self->st_empty, &added, &dup, &over,
                                     &self->ack_done))
        return -1;
    Py_INCREF(added);
    Py_XSETREF(self->added, added);
    Py_INCREF(dup);
    Py_XSETREF(self->duplicate, dup);
    Py_INCREF(over);
    Py_XSETREF(self->over_budget, over);
    if (slot_offsets((PyTypeObject *)qt, queue_fields, N_QUEUE, self->off) < 0) return -1;
    Py_INCREF(qt);
    Py_XSETREF(self->queue_type, (PyTypeObject *)qt);
    self->prio_bias = bias;
    return 0;
}

#define QSLOT(q, i) (*(PyObject **)((char *)(q) + self->off[i]))

/* A queue's field (borrowed), or NULL with AttributeError when it was never set. */
static PyObject *qget(MemoryLoops *self, PyObject *q, int i) {
    PyObject *v = QSLOT(q, i);
    if (!v) PyErr_Format(PyExc_AttributeError, "queue has no %s", queue_fields[i]);
    return v;
}

static long long qint(MemoryLoops *self, PyObject *q, int i, int *bad) {
    PyObject *v = qget(self, q, i);
    if (!v) {
        *bad = 1;
        return 0;
    }
    return as_ll(v, bad);
}

/* Set a queue's field to v (a new reference; NULL means an error is set). 0 or -1. */
static int qset(MemoryLoops *self, PyObject *q, int i, PyObject *v) {
    if (!v) return -1;
    Py_XSETREF(QSLOT(q, i), v);
    return 0;
}

static int qset_int(MemoryLoops *self, PyObject *q, int i, long long v) {
    return qset(self, q, i, PyLong_FromLongLong(v));
}

static int lease_policy(LeasePolicy *lp, PyObject *pol) {
    PyObject *v;
    int bad = 0;
    if (!pol) return -1; /* qget set the error */
    if (pol == lp->pol) return 0;
    if (!(v = PyObject_GetAttr(pol, s_concurrency))) return -1;
    lp->concurrency = as_ll(v, &bad);
    Py_DECREF(v);
    if (!(v = PyObject_GetAttr(pol, s_session_budget))) return -1;
    lp->session_budget = as_ll(v, &bad);
    Py_DECREF(v);
    if (!(v = PyObject_GetAttr(pol, s_max_queue_urls))) return -1;
    lp->max_queue_urls = as_ll(v, &bad);
    Py_DECREF(v);
    lp->session_rest = attr_double(pol, s_session_rest, &bad);
    if (bad) return -1;
    Py_INCREF(pol);
    Py_XSETREF(lp->pol, pol);
    return 0;
}

/* _heapq.heappush(heap, t) for a new tuple t (NULL: an error is set); 0 or -1. */
static int push_new(MemoryLoops *self, PyObject *heap, PyObject *t) {
    PyObject *a[2] = {heap, t}, *r;
    if (!t) return -1;
    r = PyObject_Vectorcall(heappush_fn, a, 2, NULL);
    Py_DECREF(t);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* a < b for two entries of the ready heap, (-priority, since, created, version, key):
 * what tuple comparison gives, without its generic calls for the usual types. 1, 0 or
 * -1. */
static int ready_lt(PyObject *a, PyObject *b) {
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 5 &&
        PyTuple_GET_SIZE(b) == 5) {
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        int o1, o2, n;
        long long i, j;
        if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)) goto generic;
        i = PyLong_AsLongLongAndOverflow(x, &o1);
        j = PyLong_AsLongLongAndOverflow(y, &o2);
        if (o1 || o2) goto generic;
        if (i != j) return i < j;
        x = PyTuple_GET_ITEM(a, 1);
        y = PyTuple_GET_ITEM(b, 1);
        if (!PyFloat_CheckExact(x) || !PyFloat_CheckExact(y)) goto generic;
        if (PyFloat_AS_DOUBLE(x) != PyFloat_AS_DOUBLE(y))
            return PyFloat_AS_DOUBLE(x) < PyFloat_AS_DOUBLE(y);
        for (n = 2; n < 4; n++) {  /* created, then version */
            x = PyTuple_GET_ITEM(a, n);
            y = PyTuple_GET_ITEM(b, n);
            if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)) goto generic;
            i = PyLong_AsLongLongAndOverflow(x, &o1);
            j = PyLong_AsLongLongAndOverflow(y, &o2);
            if (o1 || o2) goto generic;
            if (i != j) return i < j;
        }
        return PyObject_RichCompareBool(PyTuple_GET_ITEM(a, 4), PyTuple_GET_ITEM(b, 4), Py_LT);
    }
generic:
    if (PyErr_Occurred()) return -1;
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* a < b for two queue items (bytes: sort prefix, payload): bytes comparison without its
 * generic call. 1, 0 or -1. */
static int item_lt(PyObject *a, PyObject *b) {
    if (PyBytes_CheckExact(a) && PyBytes_CheckExact(b)) {
        Py_ssize_t m = PyBytes_GET_SIZE(a), n = PyBytes_GET_SIZE(b);
        int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)(m < n ? m : n));
        return c ? c < 0 : m < n;
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

typedef int (*less_fn)(PyObject *, PyObject *);

/* _heapq's siftdown and siftup (Modules/_heapqmodule.c: the same steps, so the same
 * heap) with a comparison of our own (ready_lt, item_lt). Items are swapped, never held outside the list, so an error
 * leaves it a permutation of its items; a comparison that changes the list's size
 * (only Python code could) is an error, as in _heapq. */
static int heap_siftdown(PyObject *heap, Py_ssize_t start, Py_ssize_t pos, less_fn less) {
    Py_ssize_t size = PyList_GET_SIZE(heap);
    PyObject **arr = ((PyListObject *)heap)->ob_item, *item = arr[pos], *parent;
    while (pos > start) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        int lt;
        parent = arr[parentpos];
        Py_INCREF(item);
        Py_INCREF(parent);
        lt = less(item, parent);
        Py_DECREF(parent);
        Py_DECREF(item);
        if (lt < 0) return -1;
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
            return -1;
        }
        if (!lt) break;
        arr = ((PyListObject *)heap)->ob_item;
        parent = arr[parentpos];
        item = arr[pos];
        arr[parentpos] = item;
        arr[pos] = parent;
        pos = parentpos;
    }
    return 0;
}

static int heap_siftup(PyObject *heap, Py_ssize_t pos, less_fn less) {
    Py_ssize_t start = pos, end = PyList_GET_SIZE(heap), limit = end >> 1;
    PyObject **arr = ((PyListObject *)heap)->ob_item, *tmp;
    while (pos < limit) {
        Py_ssize_t child = 2 * pos + 1;
        if (child + 1 < end) {
            PyObject *x = arr[child], *y = arr[child + 1];
            int lt;
            Py_INCREF(x);
            Py_INCREF(y);
            lt = less(x, y);
            Py_DECREF(x);
            Py_DECREF(y);
            if (lt < 0) return -1;
            child += (unsigned)lt ^ 1; /* the right child unless the left is smaller */
            arr = ((PyListObject *)heap)->ob_item;
            if (end != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
                return -1;
            }
        }
        tmp = arr[child];
        arr[child] = arr[pos];
        arr[pos] = tmp;
        pos = child;
    }
    return heap_siftdown(heap, start, pos, less);
}

/* heapq.heappop(heap) (a new reference; the list must not be empty). */
static PyObject *heap_pop(PyObject *heap, less_fn less) {
    Py_ssize_t n = PyList_GET_SIZE(heap);
    PyObject *last = PyList_GET_ITEM(heap, n - 1), *top;
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (n == 1) return last;
    top = PyList_GET_ITEM(heap, 0); /* the list's reference becomes ours, */
    PyList_SET_ITEM(heap, 0, last); /* and last's the list's */
    if (heap_siftup(heap, 0, less) < 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
}

/* heapq.heappush(heap, item), taking a new reference to item (NULL: an error is set). */
static int heap_push(PyObject *heap, PyObject *item, less_fn less) {
    int r;
    if (!item) return -1;
    r = PyList_Append(heap, item);
    Py_DECREF(item);
    if (r < 0) return -1;
    return heap_siftdown(heap, 0, PyList_GET_SIZE(heap) - 1, less);
}

/* MemoryStore._settle(q, now) for a queue just served or made to yield. */
static int settle_queue(MemoryLoops *self, PyObject *store_ready, PyObject *store_resting,
                        PyObject *q, LeasePolicy *lp, double now, PyObject *now_obj) {
    int bad = 0;
    long long old = qint(self, q, Q_STATE, &bad), version = qint(self, q, Q_VERSION, &bad);
    long long inflight = qint(self, q, Q_INFLIGHT, &bad), state;
    PyObject *heap = qget(self, q, Q_HEAP), *key = qget(self, q, Q_KEY);
    PyObject *ready_at = qget(self, q, Q_READY_AT), *pol = qget(self, q, Q_POLICY);
    if (bad || !heap || !key || !ready_at || !pol) return -1;
    if (!PyList_Check(heap)) {
        PyErr_SetString(PyExc_TypeError, "queue heap must be a list");
        return -1;
    }
    if (lease_policy(lp, pol) < 0) return -1;
    version += 1;
    if (qset_int(self, q, Q_VERSION, version) < 0) return -1;
    if (PyList_GET_SIZE(heap) == 0) {
        state = self->st_empty;
    } else if (inflight >= lp->concurrency) {
        state = self->st_busy;
    } else {
        double ra = as_double(ready_at, &bad);
        if (bad) return -1;
        if (ra > now) {
            state = self->st_resting;
            PyObject *v = PyLong_FromLongLong(version);
            if (!v || push_new(self, store_resting, PyTuple_Pack(3, ready_at, v, key)) < 0) {
                Py_XDECREF(v);
                return -1;
            }
            Py_DECREF(v);
        } else {
            PyObject *head = PyList_GET_ITEM(heap, 0), *since, *p, *v;
            PyObject *created = qget(self, q, Q_CREATED);
            const unsigned char *h;
            long long pinv;
            if (!PyBytes_Check(head) || PyBytes_GET_SIZE(head) < 12) {
                PyErr_SetString(PyExc_TypeError, "queue items must be bytes of 12 or more");
                return -1;
            }
            if (old == self->st_resting) {
                Py_INCREF(ready_at);
                if (qset(self, q, Q_SINCE, ready_at) < 0) return -1;
            } else if (old != self->st_ready) {
                Py_INCREF(now_obj);
                if (qset(self, q, Q_SINCE, now_obj) < 0) return -1;
            }
            if (!(since = qget(self, q, Q_SINCE))) return -1;
            h = (const unsigned char *)PyBytes_AS_STRING(head);
            pinv = ((long long)h[0] << 24) | (h[1] << 16) | (h[2] << 8) | h[3];
            state = self->st_ready;
            p = PyLong_FromLongLong(pinv - self->prio_bias);
            v = PyLong_FromLongLong(version);
            if (!p || !v || !created ||
                heap_push(store_ready, PyTuple_Pack(5, p, since, created, v, key), ready_lt) < 0) {
                Py_XDECREF(p);
                Py_XDECREF(v);
                return -1;
            }
            Py_DECREF(p);
            Py_DECREF(v);
        }
    }
    return qset_int(self, q, Q_STATE, state);
}

/* A store attribute that must be of the given type (borrowed through the store). */
static PyObject *store_attr(PyObject *store, PyObject *name, PyTypeObject *type) {
    PyObject *v = PyObject_GetAttr(store, name);
    if (v && !PyObject_TypeCheck(v, type)) {
        PyErr_Format(PyExc_TypeError, "store.%U must be a %s", name, type->tp_name);
        Py_CLEAR(v);
    }
    return v;
}

PyDoc_STRVAR(memloops_lease_doc,
             "lease(store, out, limit, now, expires): crawlq.stores.memory_loops._lease_rounds");

static PyObject *memloops_lease(MemoryLoops *self, PyObject *const *args,
                                   Py_ssize_t nargs) {
    PyObject *store, *out, *now_obj, *expires;
    PyObject *ready = NULL, *resting = NULL, *queues = NULL, *leases = NULL, *tokens = NULL;
    PyObject *taken = NULL, *t = NULL, *q = NULL, *item = NULL, *token = NULL, *row = NULL;
    PyObject *active = NULL, *more = NULL;
    LeasePolicy lp = {NULL, 0, 0, 0, 0.0};
    Py_ssize_t limit, i;
    double now;
    int bad = 0;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "lease(store, out, limit, now, expires)");
        return NULL;
    }
    store = args[0];
    out = args[1];
    now_obj = args[3];
    expires = args[4];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    now = PyFloat_AsDouble(now_obj);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    if (!(ready = store_attr(store, s_ready, &PyList_Type)) ||
        !(resting = store_attr(store, s_resting, &PyList_Type)) ||
        !(queues = store_attr(store, s_queues, &PyDict_Type)) ||
        !(leases = store_attr(store, s_leases, &PyDict_Type)) ||
        !(tokens = PyObject_GetAttr(store, s_tokens)) || !(taken = PyList_New(0)))
        goto error;
    if (!PyIter_Check(tokens)) {
        PyErr_SetString(PyExc_TypeError, "store._tokens must be an iterator");
        goto error;
    }
    /* The line (``taken``): the best ready queues, one per lease still wanted. */
    while (PyList_GET_SIZE(ready) > 0 && PyList_GET_SIZE(taken) < limit - PyList_GET_SIZE(out)) {
        long long version, qversion, state;
        PyObject *key;
        if (!(t = heap_pop(ready, ready_lt))) goto error;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) {
            PyErr_SetString(PyExc_TypeError, "ready entries must be 5-tuples");
            goto error;
        }
        key = PyTuple_GET_ITEM(t, 4);
        version = as_ll(PyTuple_GET_ITEM(t, 3), &bad);
        if (bad) goto error;
        q = PyDict_GetItemWithError(queues, key);
        if (!q) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
            goto error;
        }
        Py_INCREF(q);
        if (Py_TYPE(q) != self->queue_type) {
            PyErr_SetString(PyExc_TypeError, "store._queues holds a foreign queue type");
            goto error;
        }
        qversion = qint(self, q, Q_VERSION, &bad);
        state = qint(self, q, Q_STATE, &bad);
        if (bad) goto error;
        if (qversion == version && state == self->st_ready) {
            /* served: settle_queue sends it to the back of the line */
            if (qset_int(self, q, Q_STATE, -1) < 0 || PyList_Append(taken, q) < 0) goto error;
        }
        Py_CLEAR(t);
        Py_CLEAR(q);
    }
    /* Rounds over the line, as _lease_rounds: a fair share of what is left from each
     * queue asked (``want``: the first of ``active``), then on with those not asked and
     * those with more. */
    if (!(active = PyList_GetSlice(taken, 0, PyList_GET_SIZE(taken)))) goto error;
    while (PyList_GET_SIZE(active) > 0 && PyList_GET_SIZE(out) < limit) {
        Py_ssize_t nwant = PyList_GET_SIZE(active), w, share;
        if (nwant > limit - PyList_GET_SIZE(out)) nwant = limit - PyList_GET_SIZE(out);
        share = (limit - PyList_GET_SIZE(out)) / nwant;
        if (share < 1) share = 1;
        for (w = 0; w < nwant; w++) {
            long long inflight, session, k, room;
            PyObject *heap, *key;
            q = PyList_GET_ITEM(active, w);
            Py_INCREF(q);
            heap = qget(self, q, Q_HEAP);
            key = qget(self, q, Q_KEY);
            inflight = qint(self, q, Q_INFLIGHT, &bad);
            session = qint(self, q, Q_SESSION, &bad);
            if (bad || !heap || !key || lease_policy(&lp, qget(self, q, Q_POLICY)) < 0)
                goto error;
            if (!PyList_Check(heap)) {
                PyErr_SetString(PyExc_TypeError, "queue heap must be a list");
                goto error;
            }
            k = share;
            room = limit - PyList_GET_SIZE(out);
            if (room < k) k = room;
            if (lp.concurrency - inflight < k) k = lp.concurrency - inflight;
            if (PyList_GET_SIZE(heap) < k) k = PyList_GET_SIZE(heap);
            if (lp.session_budget) {
                /* at least one, as _lease_rounds */
                long long b = lp.session_budget - session;
                if (b < 1) b = 1;
                if (b < k) k = b;
            }
            for (i = 0; i < k; i++) {
                const unsigned char *h;
                long long pinv, retries;
                if (!(item = heap_pop(heap, item_lt))) goto error;
                if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < 12) {
                    PyErr_SetString(PyExc_TypeError, "queue items must be bytes of 12 or more");
                    goto error;
                }
                if (!(token = PyIter_Next(tokens))) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "tokens ran out");
                    goto error;
                }
                if (!(row = PyTuple_Pack(3, q, item, expires)) ||
                    PyDict_SetItem(leases, token, row) < 0)
                    goto error;
                Py_CLEAR(row);
                h = (const unsigned char *)PyBytes_AS_STRING(item);
                pinv = ((long long)h[0] << 24) | (h[1] << 16) | (h[2] << 8) | h[3];
                retries = (h[10] << 8) | h[11];
                if (!(row = PyTuple_New(6))) goto error;
                PyTuple_SET_ITEM(row, 0, token);
                token = NULL;
                Py_INCREF(key);
                PyTuple_SET_ITEM(row, 1, key);
                PyTuple_SET_ITEM(row, 2, PyLong_FromLongLong(self->prio_bias - pinv));
                PyTuple_SET_ITEM(row, 3, PyLong_FromLongLong(retries));
                PyTuple_SET_ITEM(row, 4, PyBytes_FromStringAndSize((const char *)h + 12,
                                                                   PyBytes_GET_SIZE(item) - 12));
                Py_INCREF(expires);
                PyTuple_SET_ITEM(row, 5, expires);
                if (!PyTuple_GET_ITEM(row, 2) || !PyTuple_GET_ITEM(row, 3) ||
                    !PyTuple_GET_ITEM(row, 4) || PyList_Append(out, row) < 0)
                    goto error;
                Py_CLEAR(row);
                Py_CLEAR(item);
            }
            if (qset_int(self, q, Q_INFLIGHT, inflight + k) < 0 ||
                qset_int(self, q, Q_SESSION, session + k) < 0)
                goto error;
            Py_CLEAR(q);
        }
        if (PyList_GET_SIZE(out) >= limit) break;
        /* the next round: those not asked, then those asked that have more and room */
        if (!(more = PyList_GetSlice(active, nwant, PyList_GET_SIZE(active)))) goto error;
        for (w = 0; w < nwant; w++) {
            long long inflight, session;
            PyObject *heap;
            q = PyList_GET_ITEM(active, w);
            heap = qget(self, q, Q_HEAP);
            inflight = qint(self, q, Q_INFLIGHT, &bad);
            session = qint(self, q, Q_SESSION, &bad);
            if (bad || !heap || lease_policy(&lp, qget(self, q, Q_POLICY)) < 0) {
                q = NULL;
                goto error;
            }
            if (PyList_GET_SIZE(heap) > 0 && inflight < lp.concurrency &&
                (!lp.session_budget || session < lp.session_budget) &&
                PyList_Append(more, q) < 0) {
                q = NULL;
                goto error;
            }
        }
        q = NULL;
        Py_SETREF(active, more);
        more = NULL;
    }
    for (i = 0; i < PyList_GET_SIZE(taken); i++) {
        PyObject *tq = PyList_GET_ITEM(taken, i);
        long long session = qint(self, tq, Q_SESSION, &bad);
        if (bad || lease_policy(&lp, qget(self, tq, Q_POLICY)) < 0) goto error;
        if (lp.session_budget && session >= lp.session_budget) {
            /* Yield to the others: rest a while, then the back of the line. */
            PyObject *ra = qget(self, tq, Q_READY_AT);
            double until = now + lp.session_rest, cur;
            if (!ra || qset_int(self, tq, Q_SESSION, 0) < 0) goto error;
            cur = as_double(ra, &bad);
            if (bad) goto error;
            if (until > cur && qset(self, tq, Q_READY_AT, PyFloat_FromDouble(until)) < 0)
                goto error;
        }
        if (settle_queue(self, ready, resting, tq, &lp, now, now_obj) < 0) goto error;
    }
    Py_DECREF(ready);
    Py_DECREF(resting);
    Py_DECREF(queues);
    Py_DECREF(leases);
    Py_DECREF(tokens);
    Py_DECREF(taken);
    Py_XDECREF(active);
    Py_XDECREF(lp.pol);
    Py_RETURN_NONE;
error:
    Py_XDECREF(ready);
    Py_XDECREF(resting);
    Py_XDECREF(queues);
    Py_XDECREF(leases);
    Py_XDECREF(tokens);
    Py_XDECREF(taken);
    Py_XDECREF(active);
    Py_XDECREF(more);
    Py_XDECREF(t);
    Py_XDECREF(q);
    Py_XDECREF(item);
    Py_XDECREF(token);
    Py_XDECREF(row);
    Py_XDECREF(lp.pol);
    return NULL;
}
/* The queue of key: store._queues[key], or store._queue(key) creates it. New ref. */
static PyObject *queue_for(MemoryLoops *self, PyObject *store, PyObject *queues, PyObject *key) {
    PyObject *q = PyDict_GetItemWithError(queues, key);
    if (q) {
        Py_INCREF(q);
    } else {
        if (PyErr_Occurred()) return NULL;
        if (!(q = PyObject_CallMethodOneArg(store, s_queue, key))) return NULL;
    }
    if (Py_TYPE(q) != self->queue_type) {
        PyErr_SetString(PyExc_TypeError, "store._queues holds a foreign queue type");
        Py_DECREF(q);
        return NULL;
    }
    return q;
}

/* Check add's and release's arguments (store, a list or tuple, now, a list to append
 * to) and read now. 0 or -1. */
static int batch_args(PyObject *const *args, Py_ssize_t nargs, const char *usage,
                      double *now) {
    if (nargs != 4 || !(PyList_Check(args[1]) || PyTuple_Check(args[1])) ||
        !PyList_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "%s: a list or tuple, and a list for out", usage);
        return -1;
    }
    *now = PyFloat_AsDouble(args[2]);
    return *now == -1.0 && PyErr_Occurred() ? -1 : 0;
}

PyDoc_STRVAR(memloops_add_doc,
             "add(store, entries, now, out) -> (added, seen_added, dups): "
             "crawlq.stores.memory_loops._add_entries for an exact seen-set");

static PyObject *memloops_add(MemoryLoops *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *store, *entries, *now_obj, *out;
    PyObject *queues = NULL, *seen = NULL, *revisit = NULL, *scheduled = NULL, *ticket = NULL;
    PyObject *ready = NULL, *resting = NULL, *seq_obj = NULL, *lifo = NULL;
    PyObject *q = NULL, *item = NULL, *r;
    FingerprintSet *fps = NULL; /* seen, when it is one */
    LeasePolicy lp = {NULL, 0, 0, 0, 0.0};
    Py_ssize_t n, i, added = 0, seen_added = 0, dups = 0;
    long long seq, step;
    double now;
    int bad = 0;
    if (batch_args(args, nargs, "add(store, entries, now, out)", &now) < 0) return NULL;
    store = args[0];
    entries = args[1];
    now_obj = args[2];
    out = args[3];
    if (!(queues = store_attr(store, s_queues, &PyDict_Type)) ||
        !(seen = PyObject_GetAttr(store, s_seen)) ||
        !(revisit = store_attr(store, s_revisit, &PyDict_Type)) ||
        !(scheduled = store_attr(store, s_scheduled, &PyList_Type)) ||
        !(ready = store_attr(store, s_ready, &PyList_Type)) ||
        !(resting = store_attr(store, s_resting, &PyList_Type)) ||
        !(ticket = PyObject_GetAttr(store, s_ticket)) ||
        !(seq_obj = PyObject_GetAttr(store, s_seq_n)) || !(lifo = PyObject_GetAttr(store, s_lifo)))
        goto error;
    if (Py_TYPE(seen) == &FingerprintSetType) {
        fps = (FingerprintSet *)seen;
    } else if (!PySet_Check(seen)) {
        PyErr_SetString(PyExc_TypeError, "store._seen must be a set or FingerprintSet");
        goto error;
    }
    seq = as_ll(seq_obj, &bad);
    if (bad) goto error;
    switch (PyObject_IsTrue(lifo)) {
    case -1: goto error;
    case 1: step = -1; break;
    default: step = 1;
    }
    n = PySequence_Fast_GET_SIZE(entries);
    for (i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(entries, i), *fp, *key, *payload, *nb, *rv;
        PyObject *verdict, *heap;
        long long prio, retries, accepted, state, inv;
        unsigned char *w;
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 7) {
            PyErr_SetString(PyExc_TypeError, "an entry must be a tuple of 7");
            goto error;
        }
        fp = PyTuple_GET_ITEM(e, 0);
        key = PyTuple_GET_ITEM(e, 1);
        payload = PyTuple_GET_ITEM(e, 3);
        nb = PyTuple_GET_ITEM(e, 4);
        rv = PyTuple_GET_ITEM(e, 5);
        if (!(q = queue_for(self, store, queues, key))) goto error;
        verdict = self->added;
        if (fp != Py_None) {
            int dup = fps ? fpset_contains(fps, fp) : PySet_Contains(seen, fp);
            if (dup < 0) goto error;
            if (dup && PyDict_GET_SIZE(revisit)) {
                PyObject *at = PyDict_GetItemWithError(revisit, fp);
                if (at) {
                    double t = as_double(at, &bad);
                    if (bad) goto error;
                    dup = t > now;
                } else if (PyErr_Occurred()) {
                    goto error;
                }
            }
            if (dup) {
                dups++;
                verdict = self->duplicate;
            }
        }
        if (verdict == self->added) {
            if (lease_policy(&lp, qget(self, q, Q_POLICY)) < 0) goto error;
            accepted = qint(self, q, Q_ACCEPTED, &bad);
            if (bad) goto error;
            if (lp.max_queue_urls && accepted >= lp.max_queue_urls) verdict = self->over_budget;
        }
        if (verdict != self->added) {
            if (PyList_Append(out, verdict) < 0) goto error;
            Py_CLEAR(q);
            continue;
        }
        if (fp != Py_None) {
            if ((fps ? fpset_add(fps, fp) : PySet_Add(seen, fp)) < 0) goto error;
            if (rv != Py_None) {
                if (PyDict_SetItem(revisit, fp, rv) < 0) goto error;
            } else if (PyDict_GET_SIZE(revisit)) {
                int has = PyDict_Contains(revisit, fp);
                if (has < 0 || (has && PyDict_DelItem(revisit, fp) < 0)) goto error;
            }
            seen_added++;
        }
        if (qset_int(self, q, Q_ACCEPTED, accepted + 1) < 0) goto error;
        added++;
        seq += step;
        /* struct ">IHIH" (inverted priority, sequence in 16 + 32 bits, retries) + payload */
        prio = as_ll(PyTuple_GET_ITEM(e, 2), &bad);
        retries = as_ll(PyTuple_GET_ITEM(e, 6), &bad);
        if (bad) goto error;
        inv = self->prio_bias - prio;
        if (inv < 0 || inv > 0xFFFFFFFFLL || seq < 0 || seq > 0xFFFFFFFFFFFFLL || retries < 0 ||
            retries > 0xFFFF) {
            PyErr_SetString(struct_error, "an entry's priority, sequence or retries "
                                                "is out of range");
            goto error;
        }
        if (!PyBytes_Check(payload)) {
            PyErr_SetString(PyExc_TypeError, "an entry's payload must be bytes");
            goto error;
        }
        if (!(item = PyBytes_FromStringAndSize(NULL, 12 + PyBytes_GET_SIZE(payload))))
            goto error;
        w = (unsigned char *)PyBytes_AS_STRING(item);
        w[0] = (unsigned char)(inv >> 24);
        w[1] = (unsigned char)(inv >> 16);
        w[2] = (unsigned char)(inv >> 8);
        w[3] = (unsigned char)inv;
        w[4] = (unsigned char)(seq >> 40);
        w[5] = (unsigned char)(seq >> 32);
        w[6] = (unsigned char)(seq >> 24);
        w[7] = (unsigned char)(seq >> 16);
        w[8] = (unsigned char)(seq >> 8);
        w[9] = (unsigned char)seq;
        w[10] = (unsigned char)(retries >> 8);
        w[11] = (unsigned char)retries;
        memcpy(w + 12, PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload));
        if (nb != Py_None) {
            int later = PyObject_RichCompareBool(nb, now_obj, Py_GT);
            if (later < 0) goto error;
            if (later) {
                PyObject *tk = PyIter_Next(ticket), *t;
                if (!tk) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "tickets ran out");
                    goto error;
                }
                t = PyTuple_Pack(4, nb, tk, key, item);
                Py_DECREF(tk);
                if (push_new(self, scheduled, t) < 0) goto error;
                goto next;
            }
        }
        /* _push, inlined */
        heap = qget(self, q, Q_HEAP);
        state = qint(self, q, Q_STATE, &bad);
        if (!heap || bad) goto error;
        if (!PyList_Check(heap)) {
            PyErr_SetString(PyExc_TypeError, "queue heap must be a list");
            goto error;
        }
        if (state == self->st_ready) {
            PyObject *head;
            int improves;
            if (PyList_GET_SIZE(heap) == 0 || !PyBytes_Check(head = PyList_GET_ITEM(heap, 0)) ||
                PyBytes_GET_SIZE(head) < 4) {
                PyErr_SetString(PyExc_TypeError, "a ready queue's head must be an item");
                goto error;
            }
            improves = memcmp(w, PyBytes_AS_STRING(head), 4) < 0;
            Py_INCREF(item);
            if (heap_push(heap, item, item_lt) < 0) goto error;
            if (improves && settle_queue(self, ready, resting, q, &lp, now, now_obj) < 0)
                goto error;
        } else {
            Py_INCREF(item);
            if (heap_push(heap, item, item_lt) < 0) goto error;
            if (state == self->st_empty &&
                settle_queue(self, ready, resting, q, &lp, now, now_obj) < 0)
                goto error;
        }
    next:
        Py_CLEAR(item);
        Py_CLEAR(q);
        if (PyList_Append(out, self->added) < 0) goto error;
    }
    r = PyLong_FromLongLong(seq);
    if (!r || PyObject_SetAttr(store, s_seq_n, r) < 0) {
        Py_XDECREF(r);
        goto error;
    }
    Py_DECREF(r);
    r = Py_BuildValue("(nnn)", added, seen_added, dups);
    goto done;
error:
    r = NULL;
done:
    Py_XDECREF(queues);
    Py_XDECREF(seen);
    Py_XDECREF(revisit);
    Py_XDECREF(scheduled);
    Py_XDECREF(ready);
    Py_XDECREF(resting);
    Py_XDECREF(ticket);
    Py_XDECREF(seq_obj);
    Py_XDECREF(lifo);
    Py_XDECREF(q);
    Py_XDECREF(item);
    Py_XDECREF(lp.pol);
    return r;
}
PyDoc_STRVAR(memloops_release_doc,
             "release(store, acks, now, out) -> (done, late) or None: MemoryStore.release's "
             "loop when every ack is ACK_DONE (None, having changed nothing, otherwise)");

static PyObject *memloops_release(MemoryLoops *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *store, *acks, *now_obj, *out;
    PyObject *leases = NULL, *ready = NULL, *resting = NULL, *touched = NULL, *held = NULL;
    PyObject *r = NULL;
    LeasePolicy lp = {NULL, 0, 0, 0, 0.0};
    Py_ssize_t n, i, done = 0, late = 0, pos = 0;
    double now;
    int bad = 0;
    if (batch_args(args, nargs, "release(store, acks, now, out)", &now) < 0) return NULL;
    store = args[0];
    acks = args[1];
    now_obj = args[2];
    out = args[3];
    n = PySequence_Fast_GET_SIZE(acks);
    for (i = 0; i < n; i++) { /* only plain acknowledgements; the rest: Python's loop */
        PyObject *a = PySequence_Fast_GET_ITEM(acks, i), *kind;
        if (!PyTuple_CheckExact(a) || PyTuple_GET_SIZE(a) != 8) Py_RETURN_NONE;
        kind = PyTuple_GET_ITEM(a, 1);
        if (!PyLong_CheckExact(kind) || PyLong_AsLongLong(kind) != self->ack_done) {
            if (PyErr_Occurred()) PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    if (!(leases = store_attr(store, s_leases, &PyDict_Type)) ||
        !(ready = store_attr(store, s_ready, &PyList_Type)) ||
        !(resting = store_attr(store, s_resting, &PyList_Type)) || !(touched = PyDict_New()))
        goto error;
    for (i = 0; i < n; i++) {
        PyObject *a = PySequence_Fast_GET_ITEM(acks, i), *token = PyTuple_GET_ITEM(a, 0);
        PyObject *duration = PyTuple_GET_ITEM(a, 2), *delay = PyTuple_GET_ITEM(a, 7), *q, *key;
        double rest;
        long long inflight;
        held = PyDict_GetItemWithError(leases, token);
        if (!held) {
            if (PyErr_Occurred()) goto error;
            late++;
            if (PyList_Append(out, Py_False) < 0) goto error;
            continue;
        }
        Py_INCREF(held);
        if (PyDict_DelItem(leases, token) < 0) goto error;
        if (!PyTuple_Check(held) || PyTuple_GET_SIZE(held) != 3 ||
            Py_TYPE(q = PyTuple_GET_ITEM(held, 0)) != self->queue_type) {
            PyErr_SetString(PyExc_TypeError, "a lease record must be (queue, item, expires)");
            goto error;
        }
        inflight = qint(self, q, Q_INFLIGHT, &bad);
        if (bad || qset_int(self, q, Q_INFLIGHT, inflight - 1) < 0) goto error;
        if (delay != Py_None) {
            rest = as_double(delay, &bad);
        } else {
            /* the one definition of the rest: QueuePolicy.delay (compiled by mypyc), or a
               subclass's own */
            PyObject *pol = qget(self, q, Q_POLICY), *v;
            if (!pol) goto error;
            v = PyObject_CallMethodOneArg(pol, s_delay, duration);
            if (!v) goto error;
            rest = as_double(v, &bad);
            Py_DECREF(v);
        }
        if (bad) goto error;
        if (rest > 0) {
            PyObject *ra = qget(self, q, Q_READY_AT);
            double cur;
            if (!ra) goto error;
            cur = as_double(ra, &bad);
            if (bad) goto error;
            if (now + rest > cur && qset(self, q, Q_READY_AT, PyFloat_FromDouble(now + rest)) < 0)
                goto error;
            if (qset_int(self, q, Q_SESSION, 0) < 0) goto error;
        }
        done++;
        if (!(key = qget(self, q, Q_KEY)) || PyDict_SetItem(touched, key, q) < 0 ||
            PyList_Append(out, Py_True) < 0)
            goto error;
        Py_CLEAR(held);
    }
    {
        PyObject *key, *q;
        while (PyDict_Next(touched, &pos, &key, &q))
            if (settle_queue(self, ready, resting, q, &lp, now, now_obj) < 0) goto error;
    }
    r = Py_BuildValue("(nn)", done, late);
error:
    Py_XDECREF(leases);
    Py_XDECREF(ready);
    Py_XDECREF(resting);
    Py_XDECREF(touched);
    Py_XDECREF(held);
    Py_XDECREF(lp.pol);
    return r;
}
#undef QSLOT

static PyMethodDef memloops_methods[] = {
    {"lease", (PyCFunction)(void (*)(void))memloops_lease, METH_FASTCALL,
     memloops_lease_doc},
    {"add", (PyCFunction)(void (*)(void))memloops_add, METH_FASTCALL, memloops_add_doc},
    {"release", (PyCFunction)(void (*)(void))memloops_release, METH_FASTCALL,
     memloops_release_doc},
    {NULL, NULL, 0, NULL}};

static PyTypeObject MemoryLoopsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crawlq._speedups.MemoryLoops",
    .tp_basicsize = sizeof(MemoryLoops),
    .tp_dealloc = (destructor)memloops_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("MemoryLoops(queue_type, prio_bias, states, verdicts, ack_done): "
                        "the memory store's add, lease and release loops in C."),
    .tp_methods = memloops_methods,
    .tp_init = (initproc)memloops_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"blake2b_128", py_blake2b_128, METH_O,
     "blake2b_128(data) -> hashlib.blake2b(data, digest_size=16).digest()"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "crawlq._speedups",
                                       "Frontier.add's common case, leases and the memory store's loops in C (optional).", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    /* The attribute names the C code reads, interned once. */
    static const struct {
        PyObject **str;
        const char *text;
    } names[] = {
        {&s_GET, "GET"}, {&s_concurrency, "concurrency"},
        {&s_session_budget, "session_budget"}, {&s_session_rest, "session_rest"},
        {&s_delay, "delay"}, {&s_ready, "_ready"}, {&s_resting, "_resting"},
        {&s_queues, "_queues"}, {&s_leases, "_leases"}, {&s_tokens, "_tokens"},
        {&s_max_queue_urls, "max_queue_urls"}, {&s_seen, "_seen"},
        {&s_revisit, "_revisit"}, {&s_scheduled, "_scheduled"}, {&s_ticket, "_ticket"},
        {&s_seq_n, "_seq_n"}, {&s_lifo, "lifo"}, {&s_queue, "_queue"}};
    PyTypeObject *types[] = {&FastAddType, &LeaseMakerType,
                             &FingerprintSetType, &MemoryLoopsType};
    PyObject *m;
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].str = PyUnicode_InternFromString(names[i].text))) return NULL;
    if (!(zero = PyLong_FromLong(0))) return NULL;
    {
        PyObject *heapq_mod = PyImport_ImportModule("_heapq"), *struct_mod;
        if (!heapq_mod) return NULL;
        heappush_fn = PyObject_GetAttrString(heapq_mod, "heappush");
        Py_DECREF(heapq_mod);
        if (!heappush_fn || !(struct_mod = PyImport_ImportModule("struct")))
            return NULL;
        struct_error = PyObject_GetAttrString(struct_mod, "error");
        Py_DECREF(struct_mod);
        if (!struct_error) return NULL;
    }
    m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    for (i = 0; i < sizeof types / sizeof types[0]; i++) {
        /* (readies the type and adds it under the last part of its tp_name) */
        if (PyModule_AddType(m, types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
