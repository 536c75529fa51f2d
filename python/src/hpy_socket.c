/* homa._homa: the Socket type.  Binding, the `users` count that keeps a
 * socket alive while a thread is inside libhoma with it (and lets close()
 * be finished by the last of them), send, and the blocking calls: recv in
 * GIL-free steps that check for signals, reply (zero-copy echo of a
 * request's own buffer), call (send + wait, aborting on timeout) and
 * abort; failed client RPCs raise with their id, peer and cookie. */
#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Socket
 * ------------------------------------------------------------------------ */

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

int hpy_socket_enter(SocketObject *self, const char *what)
{
    if (self->s == NULL || self->closing) {
        hpy_raise_closed(what);
        return -1;
    }
    if (hpy_check_pid(self->pid, "this Socket") < 0) return -1;
    if (self->in_comm) {
        PyErr_Format(PyExc_RuntimeError, "%s: the socket is in use by a Communicator", what);
        return -1;
    }
    self->users++;
    return 0;
}

void hpy_socket_leave(SocketObject *self)
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
        if (hpy_parse_endpoint(bind, &local, "bind") < 0) return -1;
        if (local.port == 0) local.port = (uint16_t)port;
    } else {
        local.port = (uint16_t)port;
    }
    RuntimeObject *rt = hpy_get_runtime(rtobj);
    if (rt == NULL) return -1;
    homa_socket *s = NULL;
    int rc = homa_socket_bind(rt->rt, &local, &s);
    if (rc != 0) {
        Py_DECREF(rt);
        char what[64];
        snprintf(what, sizeof(what), "Socket(port=%u)", (unsigned)local.port);
        hpy_raise_homa(rc, what);
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

PyObject *hpy_Socket_close(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->in_comm) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Socket.close(): the socket is in use by a Communicator (close that)");
        return NULL;
    }
    self->closing = 1;
    if (self->users == 0) socket_free(self);
    /* else the last user frees it; threads already blocked in recv are
     * woken within WAIT_STEP_NS. */
    Py_RETURN_NONE;
}

static PyObject *Socket_enter(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Socket_exit(SocketObject *self, PyObject *Py_UNUSED(args))
{
    return hpy_Socket_close(self, NULL);
}

static PyObject *Socket_fileno(SocketObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->s == NULL || self->closing) return hpy_raise_closed("fileno");
    if (hpy_check_pid(self->pid, "this Socket") < 0) return NULL;
    return PyLong_FromLong(homa_socket_fd(self->s));
}

/* send()'s priority=: None, a level, or a (lo, hi) pair -> homa_sendx
 * flags (0 for None); -1 with ValueError/TypeError set. */
static long priority_flags(PyObject *o)
{
    if (o == NULL || o == Py_None) return 0;
    long lo, hi;
    if (PyLong_Check(o)) {
        lo = hi = PyLong_AsLong(o);
        if (lo == -1 && PyErr_Occurred()) return -1;
    } else if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2) {
        lo = PyLong_AsLong(PyTuple_GET_ITEM(o, 0));
        if (lo == -1 && PyErr_Occurred()) return -1;
        hi = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
        if (hi == -1 && PyErr_Occurred()) return -1;
    } else {
        PyErr_SetString(PyExc_TypeError, "send: priority must be None, a level or (lo, hi)");
        return -1;
    }
    if (lo < 0 || lo > hi || hi > 7) {
        PyErr_Format(PyExc_ValueError,
                     "send: priority levels must satisfy 0 <= lo <= hi <= 7, "
                     "not (%ld, %ld)",
                     lo, hi);
        return -1;
    }
    return (long)HOMA_SEND_PRIO(lo, hi);
}

static PyObject *Socket_send(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "data", "cookie", "priority", NULL};
    PyObject *dest, *prio = NULL;
    Py_buffer data;
    unsigned long long cookie = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*|K$O", kwlist, &dest, &data, &cookie, &prio))
        return NULL;
    long flags = priority_flags(prio);
    homa_endpoint ep;
    if (flags < 0 || hpy_parse_endpoint(dest, &ep, "dest") < 0 ||
        hpy_socket_enter(self, "send") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    uint64_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        homa_sendx(self->s, &ep, (void *)data.buf, (size_t)data.len, cookie, (unsigned)flags, &id);
    Py_END_ALLOW_THREADS
    hpy_socket_leave(self);
    PyBuffer_Release(&data);
    if (rc != 0) return hpy_raise_homa(rc, "send");
    return PyLong_FromUnsignedLongLong(id);
}

/* ---------------------------------------------------------------------------
 * Socket: receive, reply, call, abort
 * ------------------------------------------------------------------------ */

/* An exception for a failed client RPC returned by homa_recv. */
static PyObject *raise_rpc_failure(int rc, const homa_msg *m, const char *what)
{
    PyObject *exc = hpy_make_exc(rc, rc, what, NULL);
    if (exc == NULL) return NULL;
    homa_endpoint ep;
    homa_msg_peer(m, &ep);
    PyObject *id = PyLong_FromUnsignedLongLong(m->id);
    PyObject *peer = hpy_endpoint_str(&ep);
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
    return hpy_raise_exc(exc);
}

/* homa_recv with the GIL released, in waits of at most WAIT_STEP_NS with a
 * signal check between them.  Returns 0 with *m filled, HOMA_ERR_AGAIN on
 * timeout, another HOMA_ERR_* (m->id set for a failed RPC), or 1 with a
 * Python exception set (signal). */
static int recv_in_steps(SocketObject *self, unsigned flags, uint64_t id, int64_t timeout_ns,
                       homa_msg *m)
{
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : hpy_mono_ns() + timeout_ns;
    for (;;) {
        int64_t wait = timeout_ns == 0 ? 0 : deadline - hpy_mono_ns();
        if (wait < 0) wait = 0;
        if (wait > WAIT_STEP_NS) wait = WAIT_STEP_NS;
        int rc;
        homa_socket *s = self->s;
        Py_BEGIN_ALLOW_THREADS
        rc = homa_recv(s, flags, id, wait, m);
        Py_END_ALLOW_THREADS
        if (rc != HOMA_ERR_AGAIN || timeout_ns == 0) return rc;
        if (hpy_mono_ns() >= deadline) return HOMA_ERR_AGAIN;
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
    if (hpy_parse_timeout(tobj, &timeout) < 0) return NULL;
    if (id == 0 && ((flags & HOMA_RECV_ANY) == 0 || (flags & ~HOMA_RECV_ANY) != 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "flags must be RECV_REQUEST, RECV_RESPONSE or RECV_ANY (or give an id)");
        return NULL;
    }
    if (hpy_socket_enter(self, "recv") < 0) return NULL;
    homa_msg m;
    int rc = recv_in_steps(self, flags, id, timeout, &m);
    PyObject *ret;
    if (rc == 1) {
        ret = NULL;
    } else if (rc == 0) {
        ret = hpy_message_new(self, &m);
    } else if (rc == HOMA_ERR_AGAIN) {
        ret = Py_NewRef(Py_None);
    } else if (m.id != 0) {
        ret = raise_rpc_failure(rc, &m, "recv");
    } else {
        ret = hpy_raise_homa(rc, "recv");
    }
    hpy_socket_leave(self);
    return ret;
}

PyObject *hpy_socket_reply(SocketObject *self, MessageObject *req, PyObject *data)
{
    if (req->sock != self) {
        PyErr_SetString(PyExc_ValueError, "reply: the request came from another socket");
        return NULL;
    }
    if (!req->m.is_request) {
        PyErr_SetString(PyExc_ValueError, "reply: the Message is a response, not a request");
        return NULL;
    }
    if (hpy_socket_enter(self, "reply") < 0) return NULL;
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
            hpy_socket_leave(self);
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = homa_reply_msg(self->s, &req->m, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&b);
    }
    hpy_socket_leave(self);
    if (rc != 0) return hpy_raise_homa(rc, "reply");
    Py_RETURN_NONE;
}

static PyObject *Socket_reply(SocketObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"request", "data", NULL};
    PyObject *req, *data;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &req, &data)) return NULL;
    if (PyObject_TypeCheck(req, &hpy_MessageType))
        return hpy_socket_reply(self, (MessageObject *)req, data);
    if (!PyLong_Check(req)) {
        PyErr_Format(PyExc_TypeError, "reply: request must be a Message or an id, not %.100s",
                     Py_TYPE(req)->tp_name);
        return NULL;
    }
    unsigned long long id = PyLong_AsUnsignedLongLong(req);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) return NULL;
    if (hpy_socket_enter(self, "reply") < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_reply(self->s, id, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    hpy_socket_leave(self);
    if (rc != 0) return hpy_raise_homa(rc, "reply");
    Py_RETURN_NONE;
}

static PyObject *Socket_abort(SocketObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (hpy_socket_enter(self, "abort") < 0) return NULL;
    int rc = homa_abort(self->s, id);
    hpy_socket_leave(self);
    if (rc != 0) return hpy_raise_homa(rc, "abort");
    Py_RETURN_NONE;
}

static PyObject *Socket_set_class(SocketObject *self, PyObject *arg)
{
    long cls = PyLong_AsLong(arg);
    if (cls == -1 && PyErr_Occurred()) return NULL;
    if (cls < 0 || cls >= HOMA_SCHED_CLASSES) {
        PyErr_Format(PyExc_ValueError, "set_class: class %ld is not 0 to %d", cls,
                     HOMA_SCHED_CLASSES - 1);
        return NULL;
    }
    /* Allowed on a Communicator's socket too: the class only orders its
     * messages against others (homa.torch.state(sched_class=...)). */
    if (self->s == NULL || self->closing) return hpy_raise_closed("set_class");
    if (hpy_check_pid(self->pid, "this Socket") < 0) return NULL;
    self->users++;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = homa_socket_set_class(self->s, (int)cls);
    Py_END_ALLOW_THREADS
    hpy_socket_leave(self);
    if (rc != 0) return hpy_raise_homa(rc, "set_class");
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
    if (hpy_parse_timeout(tobj, &timeout) < 0 || hpy_parse_endpoint(dest, &ep, "dest") < 0 ||
        hpy_socket_enter(self, "call") < 0) {
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
        hpy_raise_homa(rc, "call");
    } else {
        homa_msg m;
        /* A zero timeout would only poll once: give the response a chance. */
        rc = recv_in_steps(self, HOMA_RECV_RESPONSE, id, timeout, &m);
        if (rc == 0) {
            ret = hpy_message_new(self, &m);
        } else {
            if (rc == 1 || rc == HOMA_ERR_AGAIN || rc == HOMA_ERR_SHUTDOWN)
                (void)homa_abort(self->s, id); /* forget it; may already be gone */
            if (rc == HOMA_ERR_AGAIN)
                hpy_raise_exc(hpy_make_exc(HOMA_ERR_TIMEOUT, HOMA_ERR_AGAIN, "call",
                                           "no response within the timeout (the RPC was aborted)"));
            else if (rc != 1 && m.id != 0)
                raise_rpc_failure(rc, &m, "call");
            else if (rc != 1)
                hpy_raise_homa(rc, "call");
        }
    }
    hpy_socket_leave(self);
    return ret;
}

static PyObject *Socket_get_port(SocketObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(self->local.port);
}
static PyObject *Socket_get_endpoint(SocketObject *self, void *Py_UNUSED(c))
{
    return hpy_endpoint_str(&self->local);
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
     "send(dest, data, cookie=0, *, priority=None) -> int\n--\n\n"
     "Sends request `data` (any bytes-like object; copied) to dest ('host:port' or\n"
     "(host, port)) and returns the RPC id (even).  The response comes from\n"
     "recv(); its Message.cookie is `cookie`.  priority: a level (0-7) or a\n"
     "(lo, hi) range that the request's DATA packets keep to (HOMA_SEND_PRIO)."},
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
    {"set_class", (PyCFunction)Socket_set_class, METH_O,
     "set_class(n)\n--\n\nThe socket's scheduling class, 0 (default) to 3: its engine sends and\n"
     "grants messages of a higher class first, SRPT within a class (through\n"
     "homad: across every process of the host).  RPCs already started keep\n"
     "theirs.  homa.PermissionError above homad's max_class."},
    {"fileno", (PyCFunction)Socket_fileno, METH_NOARGS,
     "fileno() -> int\n--\n\nA descriptor for select/poll/asyncio, readable when a message may be\n"
     "waiting.  It stays readable until recv(timeout=0) (flags RECV_ANY, no id)\n"
     "returns None, so drain the socket that way on each readiness."},
    {"close", (PyCFunction)hpy_Socket_close, METH_NOARGS,
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

PyTypeObject hpy_SocketType = {
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
