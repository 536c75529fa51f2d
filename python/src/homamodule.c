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
 *   - Blocking receives wait in slices of at most SLICE_NS and check for
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
 *     same reason (libhoma's own default runtime is never used). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <homa/coll.h>
#include <homa/homa.h>

/* Longest wait inside libhoma between two signal checks. */
#define SLICE_NS ((int64_t)100000000)

static PyTypeObject RuntimeType;
static PyTypeObject SocketType;
static PyTypeObject MessageType;
static PyTypeObject CommType;

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
static PyObject *make_exc(int cls_code, int code, const char *what, const char *text)
{
    struct err_class *ec = err_class_for(cls_code);
    PyObject *cls = ec != NULL ? ec->cls : HomaError;
    int posix = ec != NULL ? ec->posix : (code == HOMA_ERR_IO ? EIO : EPROTO);
    if (text == NULL) text = homa_strerror(code);
    PyObject *msg = what != NULL ? PyUnicode_FromFormat("%s: %s", what, text)
                                 : PyUnicode_FromString(text);
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

static PyObject *raise_exc(PyObject *exc)
{
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *raise_homa(int code, const char *what)
{
    return raise_exc(make_exc(code, code, what, NULL));
}

static PyObject *raise_closed(const char *what)
{
    return raise_exc(make_exc(HOMA_ERR_SHUTDOWN, HOMA_ERR_SHUTDOWN, what, "the socket is closed"));
}

static int check_pid(pid_t pid, const char *what)
{
    if (pid == getpid()) return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "%s was created in another process: libhoma objects do not survive fork() "
                 "(create them in the child, or use the 'spawn' start method)",
                 what);
    return -1;
}

/* ---------------------------------------------------------------------------
 * Argument helpers
 * ------------------------------------------------------------------------ */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* timeout in seconds (None = forever) -> ns (HOMA_FOREVER = -1). */
static int parse_timeout(PyObject *obj, int64_t *out)
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
static int parse_endpoint(PyObject *obj, homa_endpoint *out, const char *what)
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
        PyObject *exc = make_exc(rc, rc, what, NULL);
        if (exc != NULL) {
            PyObject *r = PyObject_Repr(obj);
            if (r != NULL) {
                Py_DECREF(exc);
                const char *rs = PyUnicode_AsUTF8(r);
                PyObject *msg = PyUnicode_FromFormat("%s: cannot parse or resolve %s: %s", what,
                                                     rs != NULL ? rs : "?", homa_strerror(rc));
                Py_DECREF(r);
                if (msg == NULL) return -1;
                exc = make_exc(rc, rc, NULL, PyUnicode_AsUTF8(msg));
                Py_DECREF(msg);
            }
        }
        raise_exc(exc);
        return -1;
    }
    return 0;
}

static PyObject *endpoint_str(const homa_endpoint *ep)
{
    char buf[HOMA_ENDPOINT_STRLEN];
    if (homa_endpoint_format(ep, buf, sizeof(buf)) < 0) buf[0] = '\0';
    return PyUnicode_FromString(buf);
}

/* ---------------------------------------------------------------------------
 * Runtime
 * ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    homa_runtime *rt;
    int users; /* open sockets and communicators on rt */
    pid_t pid;
} RuntimeObject;

struct cfg_field {
    const char *name;
    size_t off;
    int wide; /* uint64_t, else uint32_t */
};
#define CFG32(f) {#f, offsetof(homa_config, f), 0}
#define CFG64(f) {#f, offsetof(homa_config, f), 1}
static const struct cfg_field cfg_fields[] = {
    CFG32(max_message_length), CFG32(max_payload),       CFG32(unsched_bytes),
    CFG32(grant_window),       CFG32(max_incoming),      CFG32(max_overcommit),
    CFG32(grant_fifo_permille), CFG32(fifo_grant_increment), CFG32(num_priorities),
    CFG64(tick_ns),            CFG32(resend_ticks),      CFG32(resend_interval),
    CFG32(timeout_ticks),      CFG32(need_ack_ticks),    CFG64(link_bps),
    CFG32(max_nic_queue_ns),   CFG32(pacer_bypass_bytes), CFG64(max_rx_bytes),
    CFG32(max_rpcs),           CFG32(max_ports),         CFG32(tombstone_ticks),
    CFG32(max_tombstones),     CFG32(gap_resend_ticks),  CFG32(adaptive_cutoffs),
    CFG32(cutoff_update_msgs),
};
#define N_CFG_FIELDS (sizeof(cfg_fields) / sizeof(cfg_fields[0]))

static int apply_config(PyObject *dict, homa_config *cfg)
{
    if (dict == NULL || dict == Py_None) return 0;
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "config must be a dict of homa_config field: int");
        return -1;
    }
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (k == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "config keys must be str");
            return -1;
        }
        const struct cfg_field *f = NULL;
        for (size_t i = 0; i < N_CFG_FIELDS; i++)
            if (strcmp(cfg_fields[i].name, k) == 0) f = &cfg_fields[i];
        if (f == NULL) {
            PyErr_Format(PyExc_ValueError, "config: unknown homa_config field '%s'", k);
            return -1;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(val);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "config: %s must be a non-negative int", k);
            return -1;
        }
        if (f->wide) {
            uint64_t v64 = v;
            memcpy((char *)cfg + f->off, &v64, sizeof(v64));
        } else {
            if (v > UINT32_MAX) {
                PyErr_Format(PyExc_ValueError, "config: %s is out of range", k);
                return -1;
            }
            uint32_t v32 = (uint32_t)v;
            memcpy((char *)cfg + f->off, &v32, sizeof(v32));
        }
    }
    return 0;
}

static int Runtime_init(RuntimeObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"busy_poll_us", "mtu", "max_payload", "link_bps", "faults", "pcap",
                             "ignore_env", "gso", "gro", "config", NULL};
    int busy = -1, ignore_env = 0, gso = 1, gro = 1;
    unsigned int mtu = 0, max_payload = 0;
    unsigned long long link_bps = 0;
    const char *faults = NULL, *pcap = NULL;
    PyObject *config = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$iIIKzzpppO", kwlist, &busy, &mtu,
                                     &max_payload, &link_bps, &faults, &pcap, &ignore_env, &gso,
                                     &gro, &config))
        return -1;
    if (self->rt != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is already initialised");
        return -1;
    }
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    if (busy >= 0) o.busy_poll_us = (uint32_t)busy;
    o.mtu = mtu;
    o.max_payload = max_payload;
    o.link_bps = link_bps;
    o.pcap_path = pcap;
    if (ignore_env) o.flags |= HOMA_RT_IGNORE_ENV;
    if (!gso) o.flags |= HOMA_RT_NO_GSO;
    if (!gro) o.flags |= HOMA_RT_NO_GRO;
    if (faults != NULL && faults[0] != '\0') {
        char err[160];
        if (homa_faults_parse(faults, &o.faults, err, sizeof(err)) != 0) {
            PyErr_Format(PyExc_ValueError, "faults: %s", err);
            return -1;
        }
    }
    if (apply_config(config, &o.config) < 0) return -1;
    const char *why = NULL;
    if (homa_config_validate(&o.config, &why) != 0) {
        PyErr_Format(PyExc_ValueError, "config: %s", why != NULL ? why : "invalid");
        return -1;
    }
    homa_runtime *rt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_runtime_create(&o, &rt);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        raise_homa(rc, "Runtime");
        return -1;
    }
    self->rt = rt;
    self->pid = getpid();
    return 0;
}

static void runtime_destroy(RuntimeObject *self)
{
    homa_runtime *rt = self->rt;
    self->rt = NULL;
    if (rt == NULL || self->pid != getpid()) return; /* a forked copy: leak it */
    Py_BEGIN_ALLOW_THREADS
    homa_runtime_destroy(rt);
    Py_END_ALLOW_THREADS
}

static void Runtime_dealloc(RuntimeObject *self)
{
    runtime_destroy(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int runtime_check(RuntimeObject *self)
{
    if (self->rt == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Runtime is closed");
        return -1;
    }
    return check_pid(self->pid, "this Runtime");
}

static PyObject *Runtime_close(RuntimeObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->rt == NULL) Py_RETURN_NONE;
    if (self->users > 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Runtime.close(): %d socket(s) or communicator(s) still open on it", self->users);
        return NULL;
    }
    runtime_destroy(self);
    Py_RETURN_NONE;
}

static PyObject *Runtime_enter(RuntimeObject *self, PyObject *Py_UNUSED(ignored))
{
    if (runtime_check(self) < 0) return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Runtime_exit(RuntimeObject *self, PyObject *Py_UNUSED(args))
{
    return Runtime_close(self, NULL);
}

static PyObject *Runtime_counters(RuntimeObject *self, PyObject *Py_UNUSED(ignored))
{
    if (runtime_check(self) < 0) return NULL;
    homa_counters ec;
    homa_driver_counters dc;
    Py_BEGIN_ALLOW_THREADS
    homa_runtime_counters(self->rt, &ec, &dc);
    Py_END_ALLOW_THREADS
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    /* Both structs are plain arrays of uint64_t in list order. */
    for (size_t i = 0; i < homa_counter_count(); i++) {
        uint64_t v;
        memcpy(&v, (const char *)&ec + i * sizeof(uint64_t), sizeof(v));
        PyObject *pv = PyLong_FromUnsignedLongLong(v);
        if (pv == NULL || PyDict_SetItemString(d, homa_counter_name(i), pv) < 0) {
            Py_XDECREF(pv);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(pv);
    }
    for (size_t i = 0; i < homa_driver_counter_count(); i++) {
        uint64_t v;
        memcpy(&v, (const char *)&dc + i * sizeof(uint64_t), sizeof(v));
        PyObject *pv = PyLong_FromUnsignedLongLong(v);
        if (pv == NULL || PyDict_SetItemString(d, homa_driver_counter_name(i), pv) < 0) {
            Py_XDECREF(pv);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(pv);
    }
    return d;
}

static PyObject *Runtime_get_config(RuntimeObject *self, void *Py_UNUSED(closure))
{
    if (runtime_check(self) < 0) return NULL;
    const homa_config *cfg = homa_runtime_config(self->rt);
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (size_t i = 0; i < N_CFG_FIELDS; i++) {
        uint64_t v = 0;
        if (cfg_fields[i].wide) {
            memcpy(&v, (const char *)cfg + cfg_fields[i].off, sizeof(v));
        } else {
            uint32_t v32;
            memcpy(&v32, (const char *)cfg + cfg_fields[i].off, sizeof(v32));
            v = v32;
        }
        PyObject *pv = PyLong_FromUnsignedLongLong(v);
        if (pv == NULL || PyDict_SetItemString(d, cfg_fields[i].name, pv) < 0) {
            Py_XDECREF(pv);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(pv);
    }
    return d;
}

static PyObject *Runtime_get_closed(RuntimeObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->rt == NULL);
}

static PyMethodDef Runtime_methods[] = {
    {"close", (PyCFunction)Runtime_close, METH_NOARGS,
     "close()\n--\n\nStops the runtime's thread and frees it.  Its sockets and communicators\n"
     "must be closed first (RuntimeError otherwise).  Closing twice is harmless."},
    {"counters", (PyCFunction)Runtime_counters, METH_NOARGS,
     "counters() -> dict\n--\n\nEngine and UDP driver counters (name -> int), summed over\n"
     "every socket the runtime had."},
    {"__enter__", (PyCFunction)Runtime_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Runtime_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Runtime_getset[] = {
    {"config", (getter)Runtime_get_config, NULL,
     "The engine configuration in force (dict; max_payload as derived).", NULL},
    {"closed", (getter)Runtime_get_closed, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RuntimeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "homa.Runtime",
    .tp_basicsize = sizeof(RuntimeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Runtime(*, busy_poll_us=None, mtu=0, max_payload=0, link_bps=0, faults=None,\n"
              "        pcap=None, ignore_env=False, gso=True, gro=True, config=None)\n"
              "--\n\n"
              "A libhoma runtime: one protocol engine, its UDP sockets and a background\n"
              "thread.  Sockets of one runtime share SRPT, grants and memory caps.\n\n"
              "busy_poll_us: spin this long in recv before sleeping (default 50).\n"
              "mtu / max_payload: path MTU or payload bytes per packet (0 = derive).\n"
              "link_bps: pacer link rate in bit/s (0 = no pacing).\n"
              "faults: fault-injection spec, e.g. 'drop=0.05,seed=7'.\n"
              "pcap: write every packet to this pcap file.\n"
              "ignore_env: ignore HOMA_FAULTS, HOMA_PCAP, HOMA_MTU, HOMA_BUSY_POLL_US.\n"
              "config: dict of homa_config fields, e.g. {'timeout_ticks': 50}.\n\n"
              "Sockets made without a runtime use a per-process default one.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Runtime_init,
    .tp_dealloc = (destructor)Runtime_dealloc,
    .tp_methods = Runtime_methods,
    .tp_getset = Runtime_getset,
};

/* The package's default runtime: one per process (see the top comment). */
static RuntimeObject *default_rt;

static RuntimeObject *get_runtime(PyObject *obj)
{
    if (obj != NULL && obj != Py_None) {
        if (!PyObject_TypeCheck(obj, &RuntimeType)) {
            PyErr_Format(PyExc_TypeError, "runtime must be a homa.Runtime or None, not %.100s",
                         Py_TYPE(obj)->tp_name);
            return NULL;
        }
        RuntimeObject *r = (RuntimeObject *)obj;
        if (runtime_check(r) < 0) return NULL;
        Py_INCREF(r);
        return r;
    }
    if (default_rt != NULL && default_rt->pid != getpid()) {
        /* Inherited through fork(): its threads are gone; leak it. */
        default_rt->rt = NULL;
        Py_CLEAR(default_rt);
    }
    if (default_rt == NULL) {
        PyObject *r = PyObject_CallNoArgs((PyObject *)&RuntimeType);
        if (r == NULL) return NULL;
        default_rt = (RuntimeObject *)r;
    }
    Py_INCREF(default_rt);
    return default_rt;
}

static PyObject *mod_default_runtime(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(ignored))
{
    return (PyObject *)get_runtime(NULL);
}

/* ---------------------------------------------------------------------------
 * Socket
 * ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    homa_socket *s;
    RuntimeObject *rt;
    int users;   /* threads using s right now (GIL-protected) */
    int closing; /* close() was called */
    int in_comm; /* a Communicator uses the socket exclusively */
    homa_endpoint local;
    pid_t pid;
} SocketObject;

/* Frees the libhoma socket; GIL held, no Python user left. */
static void socket_free(SocketObject *self)
{
    homa_socket *s = self->s;
    self->s = NULL;
    if (s == NULL) return;
    if (self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        homa_socket_close(s);
        Py_END_ALLOW_THREADS
    }
    if (self->rt != NULL) self->rt->users--;
}

static int socket_enter(SocketObject *self, const char *what)
{
    if (self->s == NULL || self->closing) {
        raise_closed(what);
        return -1;
    }
    if (check_pid(self->pid, "this Socket") < 0) return -1;
    if (self->in_comm) {
        PyErr_Format(PyExc_RuntimeError, "%s: the socket is in use by a Communicator", what);
        return -1;
    }
    self->users++;
    return 0;
}

static void socket_leave(SocketObject *self)
{
    if (--self->users == 0 && self->closing) socket_free(self);
}

static int Socket_init(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"port", "runtime", "bind", NULL};
    int port = 0;
    PyObject *rtobj = NULL, *bind = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|iOO", kwlist, &port, &rtobj, &bind)) return -1;
    if (self->s != NULL || self->rt != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Socket is already initialised");
        return -1;
    }
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "port must be in 0..65535");
        return -1;
    }
    homa_endpoint local;
    memset(&local, 0, sizeof(local));
    if (bind != NULL && bind != Py_None) {
        if (parse_endpoint(bind, &local, "bind") < 0) return -1;
        if (local.port == 0) local.port = (uint16_t)port;
    } else {
        local.port = (uint16_t)port;
    }
    RuntimeObject *rt = get_runtime(rtobj);
    if (rt == NULL) return -1;
    homa_socket *s = NULL;
    int rc = homa_socket_bind(rt->rt, &local, &s);
    if (rc != 0) {
        Py_DECREF(rt);
        char what[64];
        snprintf(what, sizeof(what), "Socket(port=%u)", (unsigned)local.port);
        raise_homa(rc, what);
        return -1;
    }
    self->s = s;
    self->rt = rt;
    rt->users++;
    self->pid = getpid();
    homa_socket_local(s, &self->local);
    return 0;
}

static void Socket_dealloc(SocketObject *self)
{
    socket_free(self);
    Py_CLEAR(self->rt);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Socket_close(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->in_comm) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Socket.close(): the socket is in use by a Communicator (close that)");
        return NULL;
    }
    self->closing = 1;
    if (self->users == 0) socket_free(self);
    /* else the last user frees it; threads already blocked in recv are
     * woken within SLICE_NS. */
    Py_RETURN_NONE;
}

static PyObject *Socket_enter(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Socket_exit(SocketObject *self, PyObject *Py_UNUSED(args))
{
    return Socket_close(self, NULL);
}

static PyObject *Socket_fileno(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->s == NULL || self->closing) return raise_closed("fileno");
    if (check_pid(self->pid, "this Socket") < 0) return NULL;
    return PyLong_FromLong(homa_socket_fd(self->s));
}

static PyObject *Socket_send(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "data", "cookie", NULL};
    PyObject *dest;
    Py_buffer data;
    unsigned long long cookie = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*|K", kwlist, &dest, &data, &cookie))
        return NULL;
    homa_endpoint ep;
    if (parse_endpoint(dest, &ep, "dest") < 0 || socket_enter(self, "send") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    uint64_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_send(self->s, &ep, data.buf, (size_t)data.len, cookie, &id);
    Py_END_ALLOW_THREADS
    socket_leave(self);
    PyBuffer_Release(&data);
    if (rc != 0) return raise_homa(rc, "send");
    return PyLong_FromUnsignedLongLong(id);
}

/* ---------------------------------------------------------------------------
 * Message
 * ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    homa_msg m; /* metadata (data and handle cleared) */
    char *buf;                /* the payload, owned (malloc) */
    Py_ssize_t len;
    int exports;  /* live buffer views */
    int released; /* release() called: no new views; buf freed when exports == 0 */
    SocketObject *sock;
} MessageObject;

static char empty_payload[1];

/* A Message from a just-received homa_msg (which is released here). */
static PyObject *message_new(SocketObject *sock, homa_msg *m)
{
    MessageObject *msg = PyObject_New(MessageObject, &MessageType);
    if (msg == NULL) {
        homa_release(sock->s, m);
        return NULL;
    }
    char *buf = NULL;
    if (m->length > 0) {
        buf = homa_msg_take(sock->s, m);
        if (buf == NULL) { /* not expected: copy instead */
            buf = malloc(m->length);
            if (buf != NULL && m->data != NULL) memcpy(buf, m->data, m->length);
        }
    }
    homa_release(sock->s, m);
    msg->m = *m;
    msg->m.data = NULL;
    msg->m.handle = NULL;
    msg->buf = buf;
    msg->len = (Py_ssize_t)m->length;
    msg->exports = 0;
    msg->released = 0;
    Py_INCREF(sock);
    msg->sock = sock;
    if (m->length > 0 && buf == NULL) {
        Py_DECREF(msg);
        return PyErr_NoMemory();
    }
    return (PyObject *)msg;
}

static void Message_dealloc(MessageObject *self)
{
    free(self->buf);
    self->buf = NULL;
    Py_CLEAR(self->sock);
    PyObject_Free(self);
}

static int Message_getbuffer(MessageObject *self, Py_buffer *view, int flags)
{
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "the Message was released");
        view->obj = NULL;
        return -1;
    }
    void *p = self->buf != NULL ? self->buf : empty_payload;
    if (PyBuffer_FillInfo(view, (PyObject *)self, p, self->len, 0, flags) < 0) return -1;
    self->exports++;
    return 0;
}

static void Message_releasebuffer(MessageObject *self, Py_buffer *Py_UNUSED(view))
{
    if (--self->exports == 0 && self->released) {
        free(self->buf);
        self->buf = NULL;
    }
}

static PyBufferProcs Message_as_buffer = {
    .bf_getbuffer = (getbufferproc)Message_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Message_releasebuffer,
};

static PyObject *Message_release(MessageObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->released) {
        self->released = 1;
        if (self->exports == 0) {
            free(self->buf);
            self->buf = NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *Message_enter(MessageObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Message_exit(MessageObject *self, PyObject *Py_UNUSED(args))
{
    return Message_release(self, NULL);
}

static PyObject *Message_tobytes(MessageObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "the Message was released");
        return NULL;
    }
    return PyBytes_FromStringAndSize(self->buf != NULL ? self->buf : "", self->len);
}

static PyObject *Message_bytes(MessageObject *self, PyObject *Py_UNUSED(ignored))
{
    return Message_tobytes(self, NULL);
}

static Py_ssize_t Message_length(MessageObject *self)
{
    return self->released ? 0 : self->len;
}

static PyObject *Message_get_id(MessageObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLongLong(self->m.id);
}
static PyObject *Message_get_cookie(MessageObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLongLong(self->m.cookie);
}
static PyObject *Message_get_is_request(MessageObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->m.is_request);
}
static PyObject *Message_get_released(MessageObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->released);
}
static PyObject *Message_get_peer(MessageObject *self, void *Py_UNUSED(c))
{
    homa_endpoint ep;
    homa_msg_peer(&self->m, &ep);
    return endpoint_str(&ep);
}
static PyObject *Message_get_data(MessageObject *self, void *Py_UNUSED(c))
{
    return PyMemoryView_FromObject((PyObject *)self);
}

static PyObject *Message_repr(MessageObject *self)
{
    homa_endpoint ep;
    homa_msg_peer(&self->m, &ep);
    char peer[HOMA_ENDPOINT_STRLEN];
    if (homa_endpoint_format(&ep, peer, sizeof(peer)) < 0) peer[0] = '\0';
    return PyUnicode_FromFormat("<homa.Message %s id=%llu peer=%s len=%zd%s>",
                                self->m.is_request ? "request" : "response",
                                (unsigned long long)self->m.id, peer, self->len,
                                self->released ? " released" : "");
}

static PyObject *socket_reply(SocketObject *self, MessageObject *req, PyObject *data);

static PyObject *Message_reply(MessageObject *self, PyObject *data)
{
    return socket_reply(self->sock, self, data);
}

static PyMethodDef Message_methods[] = {
    {"release", (PyCFunction)Message_release, METH_NOARGS,
     "release()\n--\n\nGives the payload back.  Views taken before (memoryview, numpy arrays)\n"
     "keep the memory alive until they are released themselves; new views fail.\n"
     "A request can still be replied to after release()."},
    {"tobytes", (PyCFunction)Message_tobytes, METH_NOARGS,
     "tobytes() -> bytes\n--\n\nA copy of the payload."},
    {"reply", (PyCFunction)Message_reply, METH_O,
     "reply(data)\n--\n\nReplies to this request on the socket it came from\n"
     "(same as sock.reply(msg, data))."},
    {"__bytes__", (PyCFunction)Message_bytes, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)Message_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Message_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Message_getset[] = {
    {"id", (getter)Message_get_id, NULL,
     "RPC id: even for a response (the id send() returned), odd for a request.", NULL},
    {"cookie", (getter)Message_get_cookie, NULL, "The cookie given to send() (responses).", NULL},
    {"is_request", (getter)Message_get_is_request, NULL, "True for a request to reply to.", NULL},
    {"peer", (getter)Message_get_peer, NULL, "The other side's endpoint, 'host:port'.", NULL},
    {"released", (getter)Message_get_released, NULL, "True once release() was called.", NULL},
    {"data", (getter)Message_get_data, NULL, "A memoryview of the payload (no copy).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Message_as_sequence = {
    .sq_length = (lenfunc)Message_length,
};

static PyTypeObject MessageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "homa.Message",
    .tp_basicsize = sizeof(MessageObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A received message (returned by Socket.recv() and Socket.call()).\n\n"
              "The payload is exposed without copying through the buffer protocol:\n"
              "memoryview(msg), numpy.frombuffer(msg, ...), bytes(msg) (a copy).  The\n"
              "memory stays valid while any such view exists, even after release() or\n"
              "after the socket is closed.  len(msg) is the payload length.",
    .tp_dealloc = (destructor)Message_dealloc,
    .tp_repr = (reprfunc)Message_repr,
    .tp_as_buffer = &Message_as_buffer,
    .tp_as_sequence = &Message_as_sequence,
    .tp_methods = Message_methods,
    .tp_getset = Message_getset,
};

/* ---------------------------------------------------------------------------
 * Socket: receive, reply, call, abort
 * ------------------------------------------------------------------------ */

/* An exception for a failed client RPC returned by homa_recv. */
static PyObject *raise_rpc_failure(int rc, const homa_msg *m, const char *what)
{
    PyObject *exc = make_exc(rc, rc, what, NULL);
    if (exc == NULL) return NULL;
    homa_endpoint ep;
    homa_msg_peer(m, &ep);
    PyObject *id = PyLong_FromUnsignedLongLong(m->id);
    PyObject *peer = endpoint_str(&ep);
    PyObject *cookie = PyLong_FromUnsignedLongLong(m->cookie);
    if (id == NULL || peer == NULL || cookie == NULL || PyObject_SetAttrString(exc, "id", id) < 0 ||
        PyObject_SetAttrString(exc, "peer", peer) < 0 ||
        PyObject_SetAttrString(exc, "cookie", cookie) < 0) {
        Py_XDECREF(id);
        Py_XDECREF(peer);
        Py_XDECREF(cookie);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(id);
    Py_DECREF(peer);
    Py_DECREF(cookie);
    return raise_exc(exc);
}

/* homa_recv in slices with the GIL released.  Returns 0 with *m filled,
 * HOMA_ERR_AGAIN on timeout, another HOMA_ERR_* (m->id set for a failed
 * RPC), or 1 with a Python exception set (signal). */
static int recv_sliced(SocketObject *self, unsigned flags, uint64_t id, int64_t timeout_ns,
                       homa_msg *m)
{
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : mono_ns() + timeout_ns;
    for (;;) {
        int64_t wait = timeout_ns == 0 ? 0 : deadline - mono_ns();
        if (wait < 0) wait = 0;
        if (wait > SLICE_NS) wait = SLICE_NS;
        int rc;
        homa_socket *s = self->s;
        Py_BEGIN_ALLOW_THREADS
        rc = homa_recv(s, flags, id, wait, m);
        Py_END_ALLOW_THREADS
        if (rc != HOMA_ERR_AGAIN || timeout_ns == 0) return rc;
        if (mono_ns() >= deadline) return HOMA_ERR_AGAIN;
        if (PyErr_CheckSignals() < 0) return 1;
        if (self->closing) return HOMA_ERR_SHUTDOWN;
    }
}

static PyObject *Socket_recv(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"flags", "id", "timeout", NULL};
    unsigned int flags = HOMA_RECV_ANY;
    unsigned long long id = 0;
    PyObject *tobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|IKO", kwlist, &flags, &id, &tobj)) return NULL;
    int64_t timeout;
    if (parse_timeout(tobj, &timeout) < 0) return NULL;
    if (id == 0 && ((flags & HOMA_RECV_ANY) == 0 || (flags & ~HOMA_RECV_ANY) != 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "flags must be RECV_REQUEST, RECV_RESPONSE or RECV_ANY (or give an id)");
        return NULL;
    }
    if (socket_enter(self, "recv") < 0) return NULL;
    homa_msg m;
    int rc = recv_sliced(self, flags, id, timeout, &m);
    PyObject *ret;
    if (rc == 1) {
        ret = NULL;
    } else if (rc == 0) {
        ret = message_new(self, &m);
    } else if (rc == HOMA_ERR_AGAIN) {
        ret = Py_NewRef(Py_None);
    } else if (m.id != 0) {
        ret = raise_rpc_failure(rc, &m, "recv");
    } else {
        ret = raise_homa(rc, "recv");
    }
    socket_leave(self);
    return ret;
}

static PyObject *socket_reply(SocketObject *self, MessageObject *req, PyObject *data)
{
    if (req->sock != self) {
        PyErr_SetString(PyExc_ValueError, "reply: the request came from another socket");
        return NULL;
    }
    if (!req->m.is_request) {
        PyErr_SetString(PyExc_ValueError, "reply: the Message is a response, not a request");
        return NULL;
    }
    if (socket_enter(self, "reply") < 0) return NULL;
    int rc;
    if (data == (PyObject *)req && !req->released && req->exports == 0 && req->buf != NULL) {
        /* Echo: hand the request's own buffer to libhoma, no copy. */
        char *buf = req->buf;
        size_t len = (size_t)req->len;
        Py_BEGIN_ALLOW_THREADS
        rc = homa_reply_msg_owned(self->s, &req->m, buf, len);
        Py_END_ALLOW_THREADS
        if (rc == 0) {
            req->buf = NULL;
            req->released = 1;
        }
    } else {
        Py_buffer b;
        if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) {
            socket_leave(self);
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = homa_reply_msg(self->s, &req->m, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&b);
    }
    socket_leave(self);
    if (rc != 0) return raise_homa(rc, "reply");
    Py_RETURN_NONE;
}

static PyObject *Socket_reply(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"request", "data", NULL};
    PyObject *req, *data;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &req, &data)) return NULL;
    if (PyObject_TypeCheck(req, &MessageType))
        return socket_reply(self, (MessageObject *)req, data);
    if (!PyLong_Check(req)) {
        PyErr_Format(PyExc_TypeError, "reply: request must be a Message or an id, not %.100s",
                     Py_TYPE(req)->tp_name);
        return NULL;
    }
    unsigned long long id = PyLong_AsUnsignedLongLong(req);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) return NULL;
    if (socket_enter(self, "reply") < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_reply(self->s, id, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    socket_leave(self);
    if (rc != 0) return raise_homa(rc, "reply");
    Py_RETURN_NONE;
}

static PyObject *Socket_abort(SocketObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (socket_enter(self, "abort") < 0) return NULL;
    int rc = homa_abort(self->s, id);
    socket_leave(self);
    if (rc != 0) return raise_homa(rc, "abort");
    Py_RETURN_NONE;
}

static PyObject *Socket_call(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "data", "timeout", "cookie", NULL};
    PyObject *dest, *tobj = NULL;
    Py_buffer data;
    unsigned long long cookie = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*|OK", kwlist, &dest, &data, &tobj, &cookie))
        return NULL;
    int64_t timeout;
    homa_endpoint ep;
    if (parse_timeout(tobj, &timeout) < 0 || parse_endpoint(dest, &ep, "dest") < 0 ||
        socket_enter(self, "call") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    uint64_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_send(self->s, &ep, data.buf, (size_t)data.len, cookie, &id);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *ret = NULL;
    if (rc != 0) {
        raise_homa(rc, "call");
    } else {
        homa_msg m;
        /* A zero timeout would only poll once: give the response a chance. */
        rc = recv_sliced(self, HOMA_RECV_RESPONSE, id, timeout, &m);
        if (rc == 0) {
            ret = message_new(self, &m);
        } else {
            if (rc == 1 || rc == HOMA_ERR_AGAIN || rc == HOMA_ERR_SHUTDOWN)
                (void)homa_abort(self->s, id); /* forget it; may already be gone */
            if (rc == HOMA_ERR_AGAIN)
                raise_exc(make_exc(HOMA_ERR_TIMEOUT, HOMA_ERR_AGAIN, "call",
                                   "no response within the timeout (the RPC was aborted)"));
            else if (rc != 1 && m.id != 0)
                raise_rpc_failure(rc, &m, "call");
            else if (rc != 1)
                raise_homa(rc, "call");
        }
    }
    socket_leave(self);
    return ret;
}

static PyObject *Socket_get_port(SocketObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(self->local.port);
}
static PyObject *Socket_get_endpoint(SocketObject *self, void *Py_UNUSED(c))
{
    return endpoint_str(&self->local);
}
static PyObject *Socket_get_closed(SocketObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->s == NULL || self->closing);
}
static PyObject *Socket_get_runtime(SocketObject *self, void *Py_UNUSED(c))
{
    if (self->rt == NULL) Py_RETURN_NONE;
    return Py_NewRef((PyObject *)self->rt);
}

static PyObject *Socket_repr(SocketObject *self)
{
    char ep[HOMA_ENDPOINT_STRLEN];
    if (homa_endpoint_format(&self->local, ep, sizeof(ep)) < 0) ep[0] = '\0';
    return PyUnicode_FromFormat("<homa.Socket %s%s>", ep,
                                self->s == NULL || self->closing ? " closed" : "");
}

static PyMethodDef Socket_methods[] = {
    {"send", (PyCFunction)(void (*)(void))Socket_send, METH_VARARGS | METH_KEYWORDS,
     "send(dest, data, cookie=0) -> int\n--\n\n"
     "Sends request `data` (any bytes-like object; copied) to dest ('host:port' or\n"
     "(host, port)) and returns the RPC id (even).  The response comes from\n"
     "recv(); its Message.cookie is `cookie`."},
    {"recv", (PyCFunction)(void (*)(void))Socket_recv, METH_VARARGS | METH_KEYWORDS,
     "recv(flags=RECV_ANY, id=0, timeout=None) -> Message or None\n--\n\n"
     "The next message matching flags (RECV_REQUEST, RECV_RESPONSE, RECV_ANY) or,\n"
     "if id is given, the response of that RPC.  Waits up to timeout seconds\n"
     "(None = forever, 0 = don't wait) and returns None if nothing came.\n"
     "A client RPC that failed raises its error (e.g. homa.TimeoutError) with\n"
     "attributes id, peer and cookie."},
    {"reply", (PyCFunction)(void (*)(void))Socket_reply, METH_VARARGS | METH_KEYWORDS,
     "reply(request, data)\n--\n\n"
     "Replies to a request: a Message from recv() (even released) or its id.\n"
     "reply(msg, msg) echoes the request back without copying."},
    {"call", (PyCFunction)(void (*)(void))Socket_call, METH_VARARGS | METH_KEYWORDS,
     "call(dest, data, timeout=None, cookie=0) -> Message\n--\n\n"
     "send() then wait for the response.  No response within timeout seconds:\n"
     "the RPC is aborted and homa.TimeoutError (code HOMA_ERR_AGAIN) is raised;\n"
     "a dead server gives homa.TimeoutError (code HOMA_ERR_TIMEOUT)."},
    {"abort", (PyCFunction)Socket_abort, METH_O,
     "abort(id)\n--\n\nAborts an RPC: a client RPC (even id) is forgotten; a request (odd id)\n"
     "is dropped without a reply."},
    {"fileno", (PyCFunction)Socket_fileno, METH_NOARGS,
     "fileno() -> int\n--\n\nA descriptor for select/poll/asyncio, readable when a message may be\n"
     "waiting.  It stays readable until recv(timeout=0) (flags RECV_ANY, no id)\n"
     "returns None, so drain the socket that way on each readiness."},
    {"close", (PyCFunction)Socket_close, METH_NOARGS,
     "close()\n--\n\nCloses the socket: its RPCs are aborted; threads blocked in recv() on\n"
     "it raise homa.ShutdownError.  Messages already received stay valid."},
    {"__enter__", (PyCFunction)Socket_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Socket_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Socket_getset[] = {
    {"port", (getter)Socket_get_port, NULL, "The socket's port.", NULL},
    {"endpoint", (getter)Socket_get_endpoint, NULL,
     "The local endpoint as bound, 'addr:port' ('[::]:port' for the wildcard).", NULL},
    {"closed", (getter)Socket_get_closed, NULL, "True once close() was called.", NULL},
    {"runtime", (getter)Socket_get_runtime, NULL, "The socket's Runtime.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SocketType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "homa.Socket",
    .tp_basicsize = sizeof(SocketObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Socket(port=0, runtime=None, bind=None)\n--\n\n"
              "A Homa socket on `port` (0 = ephemeral) of the wildcard address, or of the\n"
              "address `bind` ('host', 'host:port' or (host, port)).  runtime=None uses\n"
              "the per-process default Runtime.  Usable as a context manager.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Socket_init,
    .tp_dealloc = (destructor)Socket_dealloc,
    .tp_repr = (reprfunc)Socket_repr,
    .tp_methods = Socket_methods,
    .tp_getset = Socket_getset,
};

/* ---------------------------------------------------------------------------
 * Communicator
 * ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    homa_comm *comm;
    SocketObject *sock; /* the Socket it runs on; NULL for a file rendezvous */
    RuntimeObject *rt;
    int own_socket; /* close sock with the communicator */
    int busy;       /* collectives running (GIL-protected) */
    int rank, size;
    pid_t pid;
} CommObject;

static int parse_size_opt(PyObject *obj, uint32_t *out, const char *name)
{
    if (obj == NULL || obj == Py_None) return 0;
    unsigned long v = PyLong_AsUnsignedLong(obj);
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an int in 0..2**32-1", name);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int Comm_init(CommObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"rank",          "size",      "endpoints", "socket",
                             "runtime",       "path",      "host",      "own_socket",
                             "timeout_ms",    "chunk_bytes", "window",  "small_bytes",
                             NULL};
    int rank, size, own_socket = 0;
    PyObject *endpoints = NULL, *sockobj = NULL, *rtobj = NULL, *path = NULL, *host = NULL;
    PyObject *timeout_ms = NULL, *chunk = NULL, *window = NULL, *small = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ii|OOO$OOpOOOO", kwlist, &rank, &size,
                                     &endpoints, &sockobj, &rtobj, &path, &host, &own_socket,
                                     &timeout_ms, &chunk, &window, &small))
        return -1;
    if (self->comm != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Communicator is already initialised");
        return -1;
    }
    if (size < 1 || size > 4096 || rank < 0 || rank >= size) {
        PyErr_Format(PyExc_ValueError, "need 0 <= rank < size <= 4096 (got rank %d, size %d)", rank,
                     size);
        return -1;
    }
    homa_comm_options opts;
    homa_comm_options_default(&opts);
    if (parse_size_opt(timeout_ms, &opts.timeout_ms, "timeout_ms") < 0 ||
        parse_size_opt(chunk, &opts.chunk_bytes, "chunk_bytes") < 0 ||
        parse_size_opt(window, &opts.window, "window") < 0 ||
        parse_size_opt(small, &opts.small_bytes, "small_bytes") < 0)
        return -1;
    if (path != NULL && path != Py_None) {
        /* Rendezvous through a file: libhoma opens and owns the socket. */
        if (endpoints != NULL && endpoints != Py_None) {
            PyErr_SetString(PyExc_ValueError, "give either endpoints or path, not both");
            return -1;
        }
        if (sockobj != NULL && sockobj != Py_None) {
            PyErr_SetString(PyExc_ValueError, "a file rendezvous opens its own socket");
            return -1;
        }
        PyObject *fspath = NULL;
        if (!PyUnicode_FSConverter(path, &fspath)) return -1;
        homa_endpoint local;
        PyObject *h = host != NULL && host != Py_None ? host : NULL;
        PyObject *defhost = NULL;
        if (h == NULL) h = defhost = PyUnicode_FromString("127.0.0.1");
        PyObject *tup = h != NULL ? Py_BuildValue("(Oi)", h, 0) : NULL;
        Py_XDECREF(defhost);
        if (tup == NULL || parse_endpoint(tup, &local, "host") < 0) {
            Py_XDECREF(tup);
            Py_DECREF(fspath);
            return -1;
        }
        Py_DECREF(tup);
        RuntimeObject *rt = get_runtime(rtobj);
        if (rt == NULL) {
            Py_DECREF(fspath);
            return -1;
        }
        opts.runtime = rt->rt;
        homa_comm *comm = NULL;
        int rc;
        const char *p = PyBytes_AS_STRING(fspath);
        Py_BEGIN_ALLOW_THREADS
        rc = homa_comm_create_file(p, rank, size, &local, &opts, &comm);
        Py_END_ALLOW_THREADS
        Py_DECREF(fspath);
        if (rc != 0) {
            Py_DECREF(rt);
            raise_homa(rc, "Communicator (file rendezvous)");
            return -1;
        }
        self->comm = comm;
        self->rt = rt;
        rt->users++;
        self->sock = NULL;
    } else {
        if (endpoints == NULL || endpoints == Py_None) {
            PyErr_SetString(PyExc_ValueError, "Communicator needs endpoints (or path)");
            return -1;
        }
        PyObject *seq = PySequence_Fast(endpoints, "endpoints must be a sequence");
        if (seq == NULL) return -1;
        if (PySequence_Fast_GET_SIZE(seq) != size) {
            PyErr_Format(PyExc_ValueError, "endpoints has %zd entries, size is %d",
                         PySequence_Fast_GET_SIZE(seq), size);
            Py_DECREF(seq);
            return -1;
        }
        homa_endpoint *eps = PyMem_Calloc((size_t)size, sizeof(*eps));
        if (eps == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < size; i++) {
            if (parse_endpoint(PySequence_Fast_GET_ITEM(seq, i), &eps[i], "endpoints[i]") < 0) {
                PyMem_Free(eps);
                Py_DECREF(seq);
                return -1;
            }
        }
        SocketObject *sock;
        if (sockobj == NULL || sockobj == Py_None) {
            /* Open our own socket on endpoints[rank]. */
            PyObject *bind = PySequence_Fast_GET_ITEM(seq, rank);
            PyObject *kw = Py_BuildValue("{s:O,s:O}", "bind", bind, "runtime",
                                         rtobj != NULL ? rtobj : Py_None);
            PyObject *noargs = PyTuple_New(0);
            sock = kw != NULL && noargs != NULL
                       ? (SocketObject *)PyObject_Call((PyObject *)&SocketType, noargs, kw)
                       : NULL;
            Py_XDECREF(kw);
            Py_XDECREF(noargs);
            if (sock == NULL) {
                PyMem_Free(eps);
                Py_DECREF(seq);
                return -1;
            }
            own_socket = 1;
        } else {
            if (!PyObject_TypeCheck(sockobj, &SocketType)) {
                PyErr_SetString(PyExc_TypeError, "socket must be a homa.Socket");
                PyMem_Free(eps);
                Py_DECREF(seq);
                return -1;
            }
            sock = (SocketObject *)Py_NewRef(sockobj);
        }
        Py_DECREF(seq);
        if (socket_enter(sock, "Communicator") < 0) {
            PyMem_Free(eps);
            Py_DECREF(sock);
            return -1;
        }
        if (sock->users > 1) {
            socket_leave(sock);
            PyMem_Free(eps);
            Py_DECREF(sock);
            PyErr_SetString(PyExc_RuntimeError,
                            "Communicator: another thread is using the socket");
            return -1;
        }
        if (eps[rank].port != sock->local.port) {
            socket_leave(sock);
            PyErr_Format(PyExc_ValueError,
                         "endpoints[%d] names port %u but the socket is on port %u", rank,
                         (unsigned)eps[rank].port, (unsigned)sock->local.port);
            PyMem_Free(eps);
            Py_DECREF(sock);
            return -1;
        }
        opts.runtime = sock->rt->rt;
        homa_comm *comm = NULL;
        int rc = homa_comm_create(sock->s, rank, size, eps, &opts, &comm);
        socket_leave(sock);
        PyMem_Free(eps);
        if (rc != 0) {
            if (own_socket) {
                PyObject *r = Socket_close(sock, NULL);
                Py_XDECREF(r);
            }
            Py_DECREF(sock);
            raise_homa(rc, "Communicator");
            return -1;
        }
        sock->in_comm = 1;
        self->comm = comm;
        self->sock = sock;
        self->own_socket = own_socket;
        self->rt = (RuntimeObject *)Py_NewRef((PyObject *)sock->rt);
        self->rt->users++;
    }
    self->rank = rank;
    self->size = size;
    self->pid = getpid();
    return 0;
}

static void comm_destroy(CommObject *self)
{
    homa_comm *comm = self->comm;
    self->comm = NULL;
    if (comm != NULL && self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        homa_comm_destroy(comm);
        Py_END_ALLOW_THREADS
    }
    if (comm != NULL && self->rt != NULL) self->rt->users--;
    if (self->sock != NULL) {
        self->sock->in_comm = 0;
        if (self->own_socket) {
            PyObject *r = Socket_close(self->sock, NULL);
            Py_XDECREF(r);
        }
        Py_CLEAR(self->sock);
    }
}

static void Comm_dealloc(CommObject *self)
{
    comm_destroy(self);
    Py_CLEAR(self->rt);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Comm_close(CommObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->busy > 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Communicator.close(): a collective is running on it");
        return NULL;
    }
    comm_destroy(self);
    Py_RETURN_NONE;
}

static PyObject *Comm_enter(CommObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Comm_exit(CommObject *self, PyObject *Py_UNUSED(args))
{
    return Comm_close(self, NULL);
}

static int comm_enter(CommObject *self)
{
    if (self->comm == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Communicator is closed");
        return -1;
    }
    if (check_pid(self->pid, "this Communicator") < 0) return -1;
    self->busy++;
    return 0;
}

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

static int parse_dtype_arg(PyObject *obj, int *out)
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
static int get_array(PyObject *obj, Py_buffer *v, int writable, PyObject *dtype_arg,
                     homa_dtype *dt, size_t *count, const char *what)
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
    if (parse_dtype_arg(dtype_arg, &want) < 0) {
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

static int parse_op(PyObject *obj, homa_redop *out)
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

static PyObject *comm_result(CommObject *self, int rc, const char *what, PyObject *ret)
{
    self->busy--;
    if (rc != 0) return raise_homa(rc, what);
    return Py_NewRef(ret);
}

static PyObject *Comm_allreduce(CommObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "op", "out", "dtype", NULL};
    PyObject *buf, *opobj = NULL, *out = NULL, *dtobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO", kwlist, &buf, &opobj, &out, &dtobj))
        return NULL;
    homa_redop op;
    if (parse_op(opobj, &op) < 0) return NULL;
    if (out == Py_None) out = NULL;
    Py_buffer sb, rb;
    homa_dtype dt, dt2;
    size_t n, n2;
    if (get_array(buf, &sb, out == NULL, dtobj, &dt, &n, "allreduce: buf") < 0) return NULL;
    if (out != NULL) {
        if (get_array(out, &rb, 1, dtobj, &dt2, &n2, "allreduce: out") < 0) {
            PyBuffer_Release(&sb);
            return NULL;
        }
        if (dt2 != dt || n2 != n) {
            PyBuffer_Release(&sb);
            PyBuffer_Release(&rb);
            PyErr_SetString(PyExc_ValueError,
                            "allreduce: out must have the dtype and length of buf");
            return NULL;
        }
    }
    if (comm_enter(self) < 0) {
        PyBuffer_Release(&sb);
        if (out != NULL) PyBuffer_Release(&rb);
        return NULL;
    }
    void *dst = out != NULL ? rb.buf : sb.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_allreduce(self->comm, sb.buf, dst, n, dt, op);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sb);
    if (out != NULL) PyBuffer_Release(&rb);
    return comm_result(self, rc, "allreduce", out != NULL ? out : buf);
}

static PyObject *Comm_broadcast(CommObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "root", "dtype", NULL};
    PyObject *buf, *dtobj = NULL;
    int root = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|iO", kwlist, &buf, &root, &dtobj)) return NULL;
    if (root < 0 || root >= self->size) {
        PyErr_Format(PyExc_ValueError, "broadcast: root %d is not a rank (size %d)", root,
                     self->size);
        return NULL;
    }
    Py_buffer b;
    homa_dtype dt;
    size_t n;
    if (get_array(buf, &b, 1, dtobj, &dt, &n, "broadcast: buf") < 0) return NULL;
    if (comm_enter(self) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_broadcast(self->comm, b.buf, n, dt, root);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return comm_result(self, rc, "broadcast", buf);
}

/* allgather and reduce_scatter: a "small" and a "large" buffer, the large
 * one size times longer. */
static PyObject *comm_gather_scatter(CommObject *self, PyObject *args, PyObject *kwds,
                                     int scatter)
{
    static char *kwlist_ag[] = {"sendbuf", "recvbuf", "dtype", NULL};
    static char *kwlist_rs[] = {"sendbuf", "recvbuf", "op", "dtype", NULL};
    PyObject *sendobj, *recvobj, *opobj = NULL, *dtobj = NULL;
    homa_redop op = HOMA_SUM;
    if (scatter) {
        if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO", kwlist_rs, &sendobj, &recvobj,
                                         &opobj, &dtobj))
            return NULL;
        if (parse_op(opobj, &op) < 0) return NULL;
    } else if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O", kwlist_ag, &sendobj, &recvobj,
                                            &dtobj)) {
        return NULL;
    }
    const char *what = scatter ? "reduce_scatter" : "allgather";
    Py_buffer sb, rb;
    homa_dtype sdt, rdt;
    size_t sn, rn;
    if (get_array(sendobj, &sb, 0, dtobj, &sdt, &sn,
                  scatter ? "reduce_scatter: sendbuf" : "allgather: sendbuf") < 0)
        return NULL;
    if (get_array(recvobj, &rb, 1, dtobj, &rdt, &rn,
                  scatter ? "reduce_scatter: recvbuf" : "allgather: recvbuf") < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    size_t small = scatter ? rn : sn, large = scatter ? sn : rn;
    if (sdt != rdt || large != small * (size_t)self->size) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&rb);
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must hold size (%d) times the elements of %s, with the same dtype",
                     what, scatter ? "sendbuf" : "recvbuf", self->size,
                     scatter ? "recvbuf" : "sendbuf");
        return NULL;
    }
    if (comm_enter(self) < 0) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&rb);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (scatter) rc =
    homa_reduce_scatter(self->comm, sb.buf, rb.buf, small, sdt, op);
else rc = homa_allgather(self->comm, sb.buf, rb.buf, small, sdt);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sb);
    PyBuffer_Release(&rb);
    return comm_result(self, rc, what, recvobj);
}

static PyObject *Comm_allgather(CommObject *self, PyObject *args, PyObject *kwds)
{
    return comm_gather_scatter(self, args, kwds, 0);
}

static PyObject *Comm_reduce_scatter(CommObject *self, PyObject *args, PyObject *kwds)
{
    return comm_gather_scatter(self, args, kwds, 1);
}

static PyObject *Comm_barrier(CommObject *self, PyObject *Py_UNUSED(ignored))
{
    if (comm_enter(self) < 0) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_barrier(self->comm);
    Py_END_ALLOW_THREADS
    return comm_result(self, rc, "barrier", Py_None);
}

static PyObject *Comm_get_rank(CommObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(self->rank);
}
static PyObject *Comm_get_size(CommObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(self->size);
}
static PyObject *Comm_get_closed(CommObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->comm == NULL);
}
static PyObject *Comm_get_socket(CommObject *self, void *Py_UNUSED(c))
{
    if (self->sock == NULL) Py_RETURN_NONE;
    return Py_NewRef((PyObject *)self->sock);
}
static PyObject *Comm_get_endpoint(CommObject *self, void *Py_UNUSED(c))
{
    if (self->sock != NULL) return endpoint_str(&self->sock->local);
    if (self->comm == NULL) Py_RETURN_NONE;
    homa_endpoint ep;
    homa_socket_local(homa_comm_socket(self->comm), &ep);
    return endpoint_str(&ep);
}

static PyMethodDef Comm_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))Comm_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(buf, op='sum', out=None, dtype=None) -> out or buf\n--\n\n"
     "Element-wise op ('sum', 'avg', 'max', 'min') over all ranks.  In place in\n"
     "buf unless out is given.  buf/out: C-contiguous buffers (numpy arrays,\n"
     "bytearray, ...) of float32, float16, int32 or int64; dtype='bfloat16' for\n"
     "bfloat16 data held in 2-byte items.  The GIL is released during the call."},
    {"broadcast", (PyCFunction)(void (*)(void))Comm_broadcast, METH_VARARGS | METH_KEYWORDS,
     "broadcast(buf, root=0, dtype=None) -> buf\n--\n\nCopies root's buf into buf on every rank."},
    {"allgather", (PyCFunction)(void (*)(void))Comm_allgather, METH_VARARGS | METH_KEYWORDS,
     "allgather(sendbuf, recvbuf, dtype=None) -> recvbuf\n--\n\n"
     "recvbuf (size times sendbuf's length) gets rank r's sendbuf at block r."},
    {"reduce_scatter", (PyCFunction)(void (*)(void))Comm_reduce_scatter,
     METH_VARARGS | METH_KEYWORDS,
     "reduce_scatter(sendbuf, recvbuf, op='sum', dtype=None) -> recvbuf\n--\n\n"
     "sendbuf holds size blocks of recvbuf's length; rank r's recvbuf gets op\n"
     "over ranks of block r."},
    {"barrier", (PyCFunction)Comm_barrier, METH_NOARGS,
     "barrier()\n--\n\nReturns once every rank has entered the barrier."},
    {"close", (PyCFunction)Comm_close, METH_NOARGS,
     "close()\n--\n\nDestroys the communicator (and the socket it opened itself)."},
    {"__enter__", (PyCFunction)Comm_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Comm_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Comm_getset[] = {
    {"rank", (getter)Comm_get_rank, NULL, "This process's rank.", NULL},
    {"size", (getter)Comm_get_size, NULL, "The number of ranks.", NULL},
    {"closed", (getter)Comm_get_closed, NULL, "True once close() was called.", NULL},
    {"socket", (getter)Comm_get_socket, NULL,
     "The Socket it runs on (None after a file rendezvous).", NULL},
    {"endpoint", (getter)Comm_get_endpoint, NULL, "This rank's endpoint.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "homa._homa.Communicator",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Communicator(rank, size, endpoints=None, socket=None, runtime=None, *,\n"
              "             path=None, host=None, own_socket=False, timeout_ms=None,\n"
              "             chunk_bytes=None, window=None, small_bytes=None)\n--\n\n"
              "Low-level communicator (use homa.Communicator).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Comm_init,
    .tp_dealloc = (destructor)Comm_dealloc,
    .tp_methods = Comm_methods,
    .tp_getset = Comm_getset,
};

/* ---------------------------------------------------------------------------
 * Module
 * ------------------------------------------------------------------------ */

static PyObject *mod_strerror(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(homa_strerror((int)code));
}

static PyObject *mod_parse_endpoint(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    homa_endpoint ep;
    if (parse_endpoint(arg, &ep, "endpoint") < 0) return NULL;
    return endpoint_str(&ep);
}

static PyObject *mod_dtype_size(PyObject *Py_UNUSED(mod), PyObject *arg)
{
    int dt;
    if (parse_dtype_arg(arg, &dt) < 0) return NULL;
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
    if (PyType_Ready(&RuntimeType) < 0 || PyType_Ready(&SocketType) < 0 ||
        PyType_Ready(&MessageType) < 0 || PyType_Ready(&CommType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&homa_module);
    if (m == NULL) return NULL;

    HomaError = PyErr_NewExceptionWithDoc(
        "homa.HomaError",
        "Base class of libhoma errors (an OSError).  .code is the HOMA_ERR_* value\n"
        "(negative), .errno a matching errno number, str() libhoma's description.",
        PyExc_OSError, NULL);
    if (HomaError == NULL || PyModule_AddObjectRef(m, "HomaError", HomaError) < 0) goto fail;
    for (size_t i = 0; i < N_ERR_CLASSES; i++) {
        struct err_class *ec = &err_classes[i];
        PyObject *bases = ec->extra_base != NULL ? PyTuple_Pack(2, HomaError, *ec->extra_base)
                                                 : PyTuple_Pack(1, HomaError);
        if (bases == NULL) goto fail;
        char qual[64];
        snprintf(qual, sizeof(qual), "homa.%s", ec->name);
        ec->cls = PyErr_NewExceptionWithDoc(qual, ec->doc, bases, NULL);
        Py_DECREF(bases);
        if (ec->cls == NULL || PyModule_AddObjectRef(m, ec->name, ec->cls) < 0) goto fail;
    }
    if (PyModule_AddObjectRef(m, "Runtime", (PyObject *)&RuntimeType) < 0 ||
        PyModule_AddObjectRef(m, "Socket", (PyObject *)&SocketType) < 0 ||
        PyModule_AddObjectRef(m, "Message", (PyObject *)&MessageType) < 0 ||
        PyModule_AddObjectRef(m, "Communicator", (PyObject *)&CommType) < 0)
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
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (add_int(m, ints[i].name, ints[i].v) < 0) goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
