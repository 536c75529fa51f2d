/* homa._homa: what the files of the extension share.  The object structs
 * of the Runtime, Socket and Message types (the Communicator's stays in
 * hpy_comm.c), the type objects, and the helpers that cross files: errors
 * (hpy_errors.c), argument parsing (hpy_args.c), buffers and dtypes
 * (hpy_array.c), and the runtime, socket and message functions the other
 * types call.  Every such name starts with hpy_; the extension is built
 * with hidden visibility, so none of them leaves the shared object. */
#ifndef HOMA_PY_HOMAMODULE_H
#define HOMA_PY_HOMAMODULE_H

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
#define WAIT_STEP_NS ((int64_t)100000000)

extern PyTypeObject hpy_RuntimeType;
extern PyTypeObject hpy_SocketType;
extern PyTypeObject hpy_MessageType;
extern PyTypeObject hpy_CommType;

typedef struct {
    PyObject_HEAD
    homa_runtime *rt;
    int users; /* open sockets and communicators on rt */
    pid_t pid;
} RuntimeObject;

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

typedef struct {
    PyObject_HEAD
    homa_msg m; /* metadata (data and handle cleared) */
    char *buf;                /* the payload, owned (malloc) */
    Py_ssize_t len;
    int exports;  /* live buffer views */
    int released; /* release() called: no new views; buf freed when exports == 0 */
    SocketObject *sock;
} MessageObject;

/* ---- Errors (hpy_errors.c) ------------------------------------------------- */

/* Creates HomaError and its subclasses and adds them to module m.  0, or
 * -1 with an exception set. */
int hpy_errors_add(PyObject *m);
/* A new exception instance for HOMA_ERR_* `code` (class of cls_code). */
PyObject *hpy_make_exc(int cls_code, int code, const char *what, const char *text);
/* Raises exc (a new reference, may be NULL) and returns NULL. */
PyObject *hpy_raise_exc(PyObject *exc);
PyObject *hpy_raise_homa(int code, const char *what);
PyObject *hpy_raise_closed(const char *what);
/* 0 in the process that made the object, else -1 with RuntimeError. */
int hpy_check_pid(pid_t pid, const char *what);

/* ---- Arguments (hpy_args.c) ------------------------------------------------ */

int64_t hpy_mono_ns(void);
int hpy_parse_timeout(PyObject *obj, int64_t *out);
int hpy_parse_endpoint(PyObject *obj, homa_endpoint *out, const char *what);
PyObject *hpy_endpoint_str(const homa_endpoint *ep);

/* ---- Buffers and dtypes (hpy_array.c) -------------------------------------- */

int hpy_parse_dtype_arg(PyObject *obj, int *out);
int hpy_get_array(PyObject *obj, Py_buffer *v, int writable, PyObject *dtype_arg, homa_dtype *dt,
                  size_t *count, const char *what);
int hpy_parse_op(PyObject *obj, homa_redop *out);

/* ---- Runtime, Socket, Message (hpy_runtime.c, hpy_socket.c, hpy_message.c) - */

/* The Runtime obj (a new reference), or the per-process default one for
 * NULL or None; NULL with an exception set. */
RuntimeObject *hpy_get_runtime(PyObject *obj);
/* Marks one more thread using the socket; -1 with an exception set if it
 * is closed, forked or taken by a Communicator. */
int hpy_socket_enter(SocketObject *self, const char *what);
void hpy_socket_leave(SocketObject *self);
PyObject *hpy_Socket_close(SocketObject *self, PyObject *Py_UNUSED(ignored));
PyObject *hpy_socket_reply(SocketObject *self, MessageObject *req, PyObject *data);
/* A Message from a just-received homa_msg (which is released here). */
PyObject *hpy_message_new(SocketObject *sock, homa_msg *m);

#endif
