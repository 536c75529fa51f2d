/* homa._homa: buffer and dtype helpers of the collectives.  dtype names
 * (float32, float16, bfloat16, int32, int64; numpy and torch dtypes by
 * their str()), the element type of a buffer from its struct format, a
 * C-contiguous (optionally writable) buffer with its element type and
 * count (hpy_get_array(), with errors that say which requirement failed),
 * and the reduction op argument. */
#include "homamodule.h"

/* dtype names accepted by the dtype= argument. */
static const struct {
    const char *name;
    homa_dtype dt;
} dtype_names[] = {
    {"float32", HOMA_FLOAT32}, {"float", HOMA_FLOAT32},    {"f4", HOMA_FLOAT32},
    {"float16", HOMA_FLOAT16}, {"half", HOMA_FLOAT16},     {"f2", HOMA_FLOAT16},
    {"bfloat16", HOMA_BFLOAT16}, {"bf16", HOMA_BFLOAT16},  {"int32", HOMA_INT32},
    {"i4", HOMA_INT32},        {"int64", HOMA_INT64},      {"i8", HOMA_INT64},
};

int hpy_parse_dtype_arg(PyObject *obj, int *out)
{
    *out = -1;
    if (obj == NULL || obj == Py_None) return 0;
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v < 0 || homa_dtype_size((homa_dtype)v) == 0) {
            PyErr_Format(PyExc_ValueError, "unknown dtype %ld", v);
            return -1;
        }
        *out = (int)v;
        return 0;
    }
    /* numpy dtypes and torch dtypes: use their str(). */
    PyObject *s = PyUnicode_Check(obj) ? Py_NewRef(obj) : PyObject_Str(obj);
    if (s == NULL) return -1;
    const char *name = PyUnicode_AsUTF8(s);
    if (name == NULL) {
        Py_DECREF(s);
        return -1;
    }
    if (strncmp(name, "torch.", 6) == 0) name += 6;
    for (size_t i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++) {
        if (strcmp(dtype_names[i].name, name) == 0) {
            *out = (int)dtype_names[i].dt;
            Py_DECREF(s);
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "unsupported dtype %R (use float32, float16, bfloat16, int32 or int64)", obj);
    Py_DECREF(s);
    return -1;
}

/* The homa dtype of a buffer from its struct format, or -1. */
static int dtype_of_format(const Py_buffer *v)
{
    const char *f = v->format != NULL ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (f[0] == '\0' || f[1] != '\0') return -1;
    switch (f[0]) {
    case 'f': return v->itemsize == 4 ? HOMA_FLOAT32 : -1;
    case 'e': return v->itemsize == 2 ? HOMA_FLOAT16 : -1;
    case 'i':
    case 'l':
    case 'q':
        if (v->itemsize == 4) return HOMA_INT32;
        if (v->itemsize == 8) return HOMA_INT64;
        return -1;
    default: return -1;
    }
}

/* A C-contiguous buffer of `obj` and its element type and count. */
int hpy_get_array(PyObject *obj, Py_buffer *v, int writable, PyObject *dtype_arg, homa_dtype *dt,
                  size_t *count, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) {
        if (!PyObject_CheckBuffer(obj)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s must support the buffer protocol (numpy array, bytearray, ...), "
                         "not %.100s",
                         what, Py_TYPE(obj)->tp_name);
        } else if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            /* Say which requirement failed, as the usual argument errors. */
            PyErr_Clear();
            Py_buffer ro;
            if (writable && PyObject_GetBuffer(obj, &ro, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
                PyBuffer_Release(&ro);
                PyErr_Format(PyExc_TypeError, "%s must be writable (got a read-only buffer)", what);
            } else {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous buffer", what);
            }
        }
        return -1;
    }
    int want;
    if (hpy_parse_dtype_arg(dtype_arg, &want) < 0) {
        PyBuffer_Release(v);
        return -1;
    }
    int have = dtype_of_format(v);
    size_t esize;
    if (want >= 0) {
        /* Explicit dtype: the buffer's items must have its size, or be raw
         * bytes (bfloat16 arrives as uint16/int16 from numpy). */
        esize = homa_dtype_size((homa_dtype)want);
        if (v->itemsize != 1 && (size_t)v->itemsize != esize) {
            PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes cannot hold dtype %R", what,
                         v->itemsize, dtype_arg);
            PyBuffer_Release(v);
            return -1;
        }
        if ((size_t)v->len % esize != 0) {
            PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of elements",
                         what, v->len);
            PyBuffer_Release(v);
            return -1;
        }
        *dt = (homa_dtype)want;
    } else {
        if (have < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s: unsupported element format '%s' (supported: float32 'f', float16 "
                         "'e', int32, int64; bfloat16 with dtype='bfloat16')",
                         what, v->format != NULL ? v->format : "B");
            PyBuffer_Release(v);
            return -1;
        }
        *dt = (homa_dtype)have;
        esize = homa_dtype_size(*dt);
    }
    *count = (size_t)v->len / esize;
    return 0;
}

int hpy_parse_op(PyObject *obj, homa_redop *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = HOMA_SUM;
        return 0;
    }
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v < HOMA_SUM || v > HOMA_MIN) {
            PyErr_Format(PyExc_ValueError, "unknown op %ld", v);
            return -1;
        }
        *out = (homa_redop)v;
        return 0;
    }
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8(obj) : NULL;
    if (s != NULL) {
        if (!strcmp(s, "sum")) *out = HOMA_SUM;
        else if (!strcmp(s, "avg") || !strcmp(s, "mean") || !strcmp(s, "average")) *out = HOMA_AVG;
        else if (!strcmp(s, "max")) *out = HOMA_MAX;
        else if (!strcmp(s, "min")) *out = HOMA_MIN;
        else s = NULL;
        if (s != NULL) return 0;
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "op must be 'sum', 'avg', 'max' or 'min', not %R", obj);
    return -1;
}
