/* homa._homa: the C half of the Python package `homa`.
 *
 * Thin bindings of include/homa/homa.h (runtimes, sockets, RPCs) and
 * include/homa/coll.h (collectives).  The pure-Python package (homa/
 * __init__.py) re-exports these types and adds the helpers; see
 * docs/python.md.
 *
 * Design points (the why):
 *   - Every call that can block or copy a lot releases the GIL, so other
 *     Python threads (a training loop, a server) keep running.
 *   - Blocking receives wait in steps of at most WAIT_STEP_NS and check for
 *     signals in between: Ctrl-C works, and a socket closed by another
 *     thread is noticed.
 *   - A received message's bytes are taken out of libhoma with
 *     homa_msg_take() (no copy: they already are a malloc()ed buffer), so a
 *     Message stays valid after its socket is closed, and its buffer is freed
 *     only when the last memoryview of it is gone.
 *   - A Python-level `users` count, changed only with the GIL held, keeps a
 *     socket from being freed while another thread is about to enter
 *     libhoma with it: close() while others use it is completed by the last
 *     of them (libhoma itself wakes the ones already blocked).
 *   - libhoma runtimes do not survive fork(): objects remember the pid that
 *     made them, refuse to work in a child, and are leaked rather than
 *     destroyed there.  The package's default runtime is per process for the
 *     same reason (libhoma's own default runtime is never used).
 *
 * This file holds the module (its functions, constants and PyInit__homa);
 * the types and helpers are in hpy_runtime.c, hpy_socket.c,
 * hpy_message.c, hpy_comm.c, hpy_errors.c, hpy_args.c and hpy_array.c,
 * their shared declarations in homamodule.h. */
#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Module
 * ------------------------------------------------------------------------ */

static PyObject *mod_default_runtime(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(ignored))
{
    return (PyObject *)hpy_get_runtime(NULL);
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(homa_strerror((int)code));
}

static PyObject *mod_parse_endpoint(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    homa_endpoint ep;
    if (hpy_parse_endpoint(arg, &ep, "endpoint") < 0) return NULL;
    return hpy_endpoint_str(&ep);
}

static PyObject *mod_dtype_size(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    int dt;
    if (hpy_parse_dtype_arg(arg, &dt) < 0) return NULL;
    if (dt < 0) {
        PyErr_SetString(PyExc_ValueError, "dtype required");
        return NULL;
    }
    return PyLong_FromSize_t(homa_dtype_size((homa_dtype)dt));
}

static PyMethodDef module_methods[] = {
    {"strerror", (PyCFunction)mod_strerror, METH_O,
     "strerror(code) -> str\n--\n\nlibhoma's description of a HOMA_ERR_* code."},
    {"parse_endpoint", (PyCFunction)mod_parse_endpoint, METH_O,
     "parse_endpoint(ep) -> str\n--\n\n'host:port' or (host, port), resolved and normalised."},
    {"dtype_size", (PyCFunction)mod_dtype_size, METH_O,
     "dtype_size(dtype) -> int\n--\n\nBytes per element of a collective dtype."},
    {"default_runtime", (PyCFunction)mod_default_runtime, METH_NOARGS,
     "default_runtime() -> Runtime\n--\n\nThis process's default Runtime (created on first use)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef homa_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "homa._homa",
    .m_doc = "C bindings of libhoma (use the `homa` package).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_int(PyObject *m, const char *name, long v)
{
    return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__homa(void)
{
    if (PyType_Ready(&hpy_RuntimeType) < 0 || PyType_Ready(&hpy_SocketType) < 0 ||
        PyType_Ready(&hpy_MessageType) < 0 || PyType_Ready(&hpy_CommType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&homa_module);
    if (m == NULL) return NULL;

    if (hpy_errors_add(m) < 0) goto fail;
    if (PyModule_AddObjectRef(m, "Runtime", (PyObject *)&hpy_RuntimeType) < 0 ||
        PyModule_AddObjectRef(m, "Socket", (PyObject *)&hpy_SocketType) < 0 ||
        PyModule_AddObjectRef(m, "Message", (PyObject *)&hpy_MessageType) < 0 ||
        PyModule_AddObjectRef(m, "Communicator", (PyObject *)&hpy_CommType) < 0)
        goto fail;

    static const struct {
        const char *name;
        long v;
    } ints[] = {
        {"RECV_REQUEST", HOMA_RECV_REQUEST},
        {"RECV_RESPONSE", HOMA_RECV_RESPONSE},
        {"RECV_ANY", HOMA_RECV_ANY},
        {"SUM", HOMA_SUM},
        {"AVG", HOMA_AVG},
        {"MAX", HOMA_MAX},
        {"MIN", HOMA_MIN},
        {"FLOAT32", HOMA_FLOAT32},
        {"FLOAT16", HOMA_FLOAT16},
        {"BFLOAT16", HOMA_BFLOAT16},
        {"INT32", HOMA_INT32},
        {"INT64", HOMA_INT64},
        {"ERR_INVAL", HOMA_ERR_INVAL},
        {"ERR_NOMEM", HOMA_ERR_NOMEM},
        {"ERR_AGAIN", HOMA_ERR_AGAIN},
        {"ERR_TIMEOUT", HOMA_ERR_TIMEOUT},
        {"ERR_NOT_FOUND", HOMA_ERR_NOT_FOUND},
        {"ERR_MSGSIZE", HOMA_ERR_MSGSIZE},
        {"ERR_PORT_IN_USE", HOMA_ERR_PORT_IN_USE},
        {"ERR_NO_PORT", HOMA_ERR_NO_PORT},
        {"ERR_ABORTED", HOMA_ERR_ABORTED},
        {"ERR_LIMIT", HOMA_ERR_LIMIT},
        {"ERR_STATE", HOMA_ERR_STATE},
        {"ERR_SHUTDOWN", HOMA_ERR_SHUTDOWN},
        {"ERR_IO", HOMA_ERR_IO},
        {"ERR_ADDR", HOMA_ERR_ADDR},
        {"ERR_UNREACHABLE", HOMA_ERR_UNREACHABLE},
        {"ERR_PERM", HOMA_ERR_PERM},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (add_int(m, ints[i].name, ints[i].v) < 0) goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
