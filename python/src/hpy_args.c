/* homa._homa: argument helpers shared by the types.  Timeouts in seconds
 * (None = forever) to nanoseconds, endpoints given as 'host:port',
 * '[v6]:port' or (host, port) to homa_endpoint (with an error that names
 * what could not be resolved), an endpoint back to a str, and the
 * monotonic clock the blocking calls measure their deadlines with. */
#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Argument helpers
 * ------------------------------------------------------------------------ */

int64_t hpy_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* timeout in seconds (None = forever) -> ns (HOMA_FOREVER = -1). */
int hpy_parse_timeout(PyObject *obj, int64_t *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = HOMA_FOREVER;
        return 0;
    }
    double t = PyFloat_AsDouble(obj);
    if (t == -1.0 && PyErr_Occurred()) return -1;
    if (!(t >= 0)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be None or a number of seconds >= 0");
        return -1;
    }
    *out = t > 9.0e9 ? HOMA_FOREVER : (int64_t)(t * 1e9);
    return 0;
}

/* "host:port", "[v6]:port", or a (host, port) tuple -> endpoint. */
int hpy_parse_endpoint(PyObject *obj, homa_endpoint *out, const char *what)
{
    int rc;
    if (PyUnicode_Check(obj)) {
        const char *s = PyUnicode_AsUTF8(obj);
        if (s == NULL) return -1;
        rc = homa_endpoint_parse(s, out);
    } else if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2) {
        PyObject *h = PyTuple_GET_ITEM(obj, 0);
        long port = PyLong_AsLong(PyTuple_GET_ITEM(obj, 1));
        if (port == -1 && PyErr_Occurred()) return -1;
        if (!PyUnicode_Check(h) || port < 0 || port > 65535) {
            PyErr_Format(PyExc_ValueError, "%s: expected (host: str, port: 0..65535)", what);
            return -1;
        }
        const char *s = PyUnicode_AsUTF8(h);
        if (s == NULL) return -1;
        rc = homa_endpoint_from_host(s, (uint16_t)port, out);
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be 'host:port' or a (host, port) tuple, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (rc != 0) {
        PyObject *exc = hpy_make_exc(rc, rc, what, NULL);
        if (exc != NULL) {
            PyObject *r = PyObject_Repr(obj);
            if (r != NULL) {
                Py_DECREF(exc);
                const char *rs = PyUnicode_AsUTF8(r);
                PyObject *msg = PyUnicode_FromFormat("%s: cannot parse or resolve %s: %s", what,
                                                     rs != NULL ? rs : "?", homa_strerror(rc));
                Py_DECREF(r);
                if (msg == NULL) return -1;
                exc = hpy_make_exc(rc, rc, NULL, PyUnicode_AsUTF8(msg));
                Py_DECREF(msg);
            }
        }
        hpy_raise_exc(exc);
        return -1;
    }
    return 0;
}

PyObject *hpy_endpoint_str(const homa_endpoint *ep)
{
    char buf[HOMA_ENDPOINT_STRLEN];
    if (homa_endpoint_format(ep, buf, sizeof(buf)) < 0) buf[0] = '\0';
    return PyUnicode_FromString(buf);
}
