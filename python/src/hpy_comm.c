/* homa._homa: the Communicator type (collectives).  Creation from a list
 * of endpoints on a given or its own Socket (which it then uses
 * exclusively), or through a rendezvous file; allreduce, broadcast,
 * allgather, reduce_scatter and barrier on buffers (numpy arrays,
 * bytearray, ...) with the GIL released; close(), refused while a
 * collective runs on it. */
#include "homamodule.h"

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
        if (tup == NULL || hpy_parse_endpoint(tup, &local, "host") < 0) {
            Py_XDECREF(tup);
            Py_DECREF(fspath);
            return -1;
        }
        Py_DECREF(tup);
        RuntimeObject *rt = hpy_get_runtime(rtobj);
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
            hpy_raise_homa(rc, "Communicator (file rendezvous)");
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
            if (hpy_parse_endpoint(PySequence_Fast_GET_ITEM(seq, i), &eps[i], "endpoints[i]") < 0) {
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
                       ? (SocketObject *)PyObject_Call((PyObject *)&hpy_SocketType, noargs, kw)
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
            if (!PyObject_TypeCheck(sockobj, &hpy_SocketType)) {
                PyErr_SetString(PyExc_TypeError, "socket must be a homa.Socket");
                PyMem_Free(eps);
                Py_DECREF(seq);
                return -1;
            }
            sock = (SocketObject *)Py_NewRef(sockobj);
        }
        Py_DECREF(seq);
        if (hpy_socket_enter(sock, "Communicator") < 0) {
            PyMem_Free(eps);
            Py_DECREF(sock);
            return -1;
        }
        if (sock->users > 1) {
            hpy_socket_leave(sock);
            PyMem_Free(eps);
            Py_DECREF(sock);
            PyErr_SetString(PyExc_RuntimeError,
                            "Communicator: another thread is using the socket");
            return -1;
        }
        if (eps[rank].port != sock->local.port) {
            hpy_socket_leave(sock);
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
        hpy_socket_leave(sock);
        PyMem_Free(eps);
        if (rc != 0) {
            if (own_socket) {
                PyObject *r = hpy_Socket_close(sock, NULL);
                Py_XDECREF(r);
            }
            Py_DECREF(sock);
            hpy_raise_homa(rc, "Communicator");
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
            PyObject *r = hpy_Socket_close(self->sock, NULL);
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
    if (hpy_check_pid(self->pid, "this Communicator") < 0) return -1;
    self->busy++;
    return 0;
}

static PyObject *comm_result(CommObject *self, int rc, const char *what, PyObject *ret)
{
    self->busy--;
    if (rc != 0) return hpy_raise_homa(rc, what);
    return Py_NewRef(ret);
}

static PyObject *Comm_allreduce(CommObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "op", "out", "dtype", NULL};
    PyObject *buf, *opobj = NULL, *out = NULL, *dtobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO", kwlist, &buf, &opobj, &out, &dtobj))
        return NULL;
    homa_redop op;
    if (hpy_parse_op(opobj, &op) < 0) return NULL;
    if (out == Py_None) out = NULL;
    Py_buffer sb, rb;
    homa_dtype dt, dt2;
    size_t n, n2;
    if (hpy_get_array(buf, &sb, out == NULL, dtobj, &dt, &n, "allreduce: buf") < 0) return NULL;
    if (out != NULL) {
        if (hpy_get_array(out, &rb, 1, dtobj, &dt2, &n2, "allreduce: out") < 0) {
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
    if (hpy_get_array(buf, &b, 1, dtobj, &dt, &n, "broadcast: buf") < 0) return NULL;
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
        if (hpy_parse_op(opobj, &op) < 0) return NULL;
    } else if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O", kwlist_ag, &sendobj, &recvobj,
                                            &dtobj)) {
        return NULL;
    }
    const char *what = scatter ? "reduce_scatter" : "allgather";
    Py_buffer sb, rb;
    homa_dtype sdt, rdt;
    size_t sn, rn;
    if (hpy_get_array(sendobj, &sb, 0, dtobj, &sdt, &sn,
                      scatter ? "reduce_scatter: sendbuf" : "allgather: sendbuf") < 0)
        return NULL;
    if (hpy_get_array(recvobj, &rb, 1, dtobj, &rdt, &rn,
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
    if (self->sock != NULL) return hpy_endpoint_str(&self->sock->local);
    if (self->comm == NULL) Py_RETURN_NONE;
    homa_endpoint ep;
    homa_socket_local(homa_comm_socket(self->comm), &ep);
    return hpy_endpoint_str(&ep);
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

PyTypeObject hpy_CommType = {
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
