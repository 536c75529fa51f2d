/* homa._homa: the Message type.  A received message whose payload was
 * taken out of libhoma without a copy (hpy_message_new()); it exposes the
 * payload through the buffer protocol and frees it only when release()
 * was called or the Message is gone and no view of it is left, so views
 * outlive the socket.  Its metadata (id, cookie, peer) and reply(). */
#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Message
 * ------------------------------------------------------------------------ */

static char empty_payload[1];

/* A Message from a just-received homa_msg (which is released here). */
PyObject *hpy_message_new(SocketObject *sock, homa_msg *m)
{
    MessageObject *msg = PyObject_New(MessageObject, &hpy_MessageType);
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
    return hpy_endpoint_str(&ep);
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

static PyObject *Message_reply(MessageObject *self, PyObject *data)
{
    return hpy_socket_reply(self->sock, self, data);
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

PyTypeObject hpy_MessageType = {
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
