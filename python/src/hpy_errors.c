/* homa._homa: errors.  The exception classes (HomaError, an OSError, and
 * one subclass per HOMA_ERR_* code, some also deriving from a builtin such
 * as TimeoutError), created when the module is imported
 * (hpy_errors_add()), and the functions that build and raise them from a
 * libhoma error code; also the fork() check every object makes before it
 * touches libhoma. */
#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

static PyObject *HomaError;

struct err_class {
    int code;         /* HOMA_ERR_* */
    int posix;        /* errno-style number shown by OSError */
    const char *name; /* class name in the homa package */
    const char *doc;
    PyObject **extra_base; /* a builtin to derive from as well, or NULL */
    PyObject *cls;
};

static struct err_class err_classes[] = {
    {HOMA_ERR_INVAL, EINVAL, "InvalidArgumentError",
     "libhoma rejected an argument (HOMA_ERR_INVAL); also a ValueError.", &PyExc_ValueError, NULL},
    {HOMA_ERR_NOMEM, ENOMEM, "OutOfMemoryError",
     "Allocation failed or a configured memory cap was hit (HOMA_ERR_NOMEM).", &PyExc_MemoryError,
     NULL},
    {HOMA_ERR_AGAIN, EAGAIN, "WouldBlockError",
     "Nothing available now (HOMA_ERR_AGAIN); also a BlockingIOError.", &PyExc_BlockingIOError,
     NULL},
    {HOMA_ERR_TIMEOUT, ETIMEDOUT, "TimeoutError",
     "A peer was silent for too long (HOMA_ERR_TIMEOUT), or Socket.call() got no response\n"
     "within its timeout (code HOMA_ERR_AGAIN).  Also a builtins.TimeoutError.",
     &PyExc_TimeoutError, NULL},
    {HOMA_ERR_NOT_FOUND, ENOENT, "NotFoundError",
     "No such RPC: unknown id, or already completed (HOMA_ERR_NOT_FOUND).", NULL, NULL},
    {HOMA_ERR_MSGSIZE, EMSGSIZE, "MessageTooLongError",
     "Message longer than the runtime's max_message_length (HOMA_ERR_MSGSIZE).", NULL, NULL},
    {HOMA_ERR_PORT_IN_USE, EADDRINUSE, "PortInUseError",
     "The port is already open (HOMA_ERR_PORT_IN_USE).", NULL, NULL},
    {HOMA_ERR_ABORTED, ECANCELED, "AbortedError", "The RPC was aborted (HOMA_ERR_ABORTED).", NULL,
     NULL},
    {HOMA_ERR_LIMIT, ENOBUFS, "LimitError",
     "Too many RPCs or ports for the configured limits (HOMA_ERR_LIMIT).", NULL, NULL},
    {HOMA_ERR_STATE, EPROTO, "StateError",
     "Operation not valid in the current state, e.g. a second reply, or a collective on a\n"
     "communicator broken by an earlier error (HOMA_ERR_STATE).",
     NULL, NULL},
    {HOMA_ERR_SHUTDOWN, ESHUTDOWN, "ShutdownError",
     "The socket (or runtime) is closed or closing (HOMA_ERR_SHUTDOWN).", NULL, NULL},
    {HOMA_ERR_ADDR, EADDRNOTAVAIL, "AddressError",
     "An address could not be parsed or resolved (HOMA_ERR_ADDR); also a ValueError.",
     &PyExc_ValueError, NULL},
    {HOMA_ERR_UNREACHABLE, EHOSTUNREACH, "UnreachableError",
     "The network answered ICMP unreachable for the peer: no Homa there, or no such port\n"
     "(HOMA_ERR_UNREACHABLE).",
     NULL, NULL},
    {HOMA_ERR_PERM, EPERM, "NotPermittedError",
     "Not permitted (HOMA_ERR_PERM): homad's policy refuses this user the port, or the\n"
     "raw IP driver lacks CAP_NET_RAW; also a builtins.PermissionError.",
     &PyExc_PermissionError, NULL},
};
#define N_ERR_CLASSES (sizeof(err_classes) / sizeof(err_classes[0]))

static struct err_class *err_class_for(int code)
{
    for (size_t i = 0; i < N_ERR_CLASSES; i++)
        if (err_classes[i].code == code) return &err_classes[i];
    return NULL;
}

/* A new exception instance for HOMA_ERR_* `code`: the class of that code,
 * OSError args (errno-style number, message), attribute `code`.  `what`
 * (optional) prefixes the message with the operation.  `cls_code` picks the
 * class when it differs from the code (call() timeouts). */
PyObject *hpy_make_exc(int cls_code, int code, const char *what, const char *text)
{
    struct err_class *ec = err_class_for(cls_code);
    PyObject *cls = ec != NULL ? ec->cls : HomaError;
    int posix = ec != NULL ? ec->posix : (code == HOMA_ERR_IO ? EIO : EPROTO);
    if (text == NULL) text = homa_strerror(code);
    PyObject *msg =
        what != NULL ? PyUnicode_FromFormat("%s: %s", what, text) : PyUnicode_FromString(text);
    if (msg == NULL) return NULL;
    PyObject *exc = PyObject_CallFunction(cls, "iO", posix, msg);
    Py_DECREF(msg);
    if (exc == NULL) return NULL;
    PyObject *c = PyLong_FromLong(code);
    if (c == NULL || PyObject_SetAttrString(exc, "code", c) < 0) {
        Py_XDECREF(c);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(c);
    return exc;
}

PyObject *hpy_raise_exc(PyObject *exc)
{
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *hpy_raise_homa(int code, const char *what)
{
    return hpy_raise_exc(hpy_make_exc(code, code, what, NULL));
}

PyObject *hpy_raise_closed(const char *what)
{
    return hpy_raise_exc(
        hpy_make_exc(HOMA_ERR_SHUTDOWN, HOMA_ERR_SHUTDOWN, what, "the socket is closed"));
}

int hpy_check_pid(pid_t pid, const char *what)
{
    if (pid == getpid()) return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "%s was created in another process: libhoma objects do not survive fork() "
                 "(create them in the child, or use the 'spawn' start method)",
                 what);
    return -1;
}

int hpy_errors_add(PyObject *m)
{
    HomaError = PyErr_NewExceptionWithDoc(
        "homa.HomaError",
        "Base class of libhoma errors (an OSError).  .code is the HOMA_ERR_* value\n"
        "(negative), .errno a matching errno number, str() libhoma's description.",
        PyExc_OSError, NULL);
    if (HomaError == NULL || PyModule_AddObjectRef(m, "HomaError", HomaError) < 0) return -1;
    for (size_t i = 0; i < N_ERR_CLASSES; i++) {
        struct err_class *ec = &err_classes[i];
        PyObject *bases = ec->extra_base != NULL ? PyTuple_Pack(2, HomaError, *ec->extra_base)
                                                 : PyTuple_Pack(1, HomaError);
        if (bases == NULL) return -1;
        char qual[64];
        snprintf(qual, sizeof(qual), "homa.%s", ec->name);
        ec->cls = PyErr_NewExceptionWithDoc(qual, ec->doc, bases, NULL);
        Py_DECREF(bases);
        if (ec->cls == NULL || PyModule_AddObjectRef(m, ec->name, ec->cls) < 0) return -1;
    }
    return 0;
}
