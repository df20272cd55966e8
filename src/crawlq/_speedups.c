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
 * Also here: Frontier.next's Lease objects (LeaseMaker), the C twin of a Python
 * definition that stays the fallback. (The stores' per-entry rules are compiled from
 * their one Python definition by mypyc instead: crawlq/stores/sqlite_rows.py and
 * crawlq/stores/memory_loops.py.)
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

static PyMethodDef module_methods[] = {
    {"blake2b_128", py_blake2b_128, METH_O,
     "blake2b_128(data) -> hashlib.blake2b(data, digest_size=16).digest()"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "crawlq._speedups",
                                       "Frontier.add's common case and leases in C (optional).", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    /* The attribute names the C code reads, interned once. */
    static const struct {
        PyObject **str;
        const char *text;
    } names[] = {
        {&s_GET, "GET"}};
    PyTypeObject *types[] = {&FastAddType, &LeaseMakerType, &FingerprintSetType};
    PyObject *m;
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].str = PyUnicode_InternFromString(names[i].text))) return NULL;
    if (!(zero = PyLong_FromLong(0))) return NULL;
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
