/* homa._homa: the Runtime type.  A libhoma runtime (engine, UDP sockets,
 * background thread) made from keyword options and a homa_config dict,
 * its counters and configuration as dicts, close() once no socket or
 * communicator uses it, and the package's per-process default runtime
 * (hpy_get_runtime()), which the other types fall back on. */
#include <string.h>

#include "homamodule.h"

/* ---------------------------------------------------------------------------
 * Runtime
 * ------------------------------------------------------------------------ */

struct cfg_field {
    const char *name;
    size_t off;
    int wide; /* uint64_t, else uint32_t */
};
#define CFG32(f)                                                                                   \
    {                                                                                              \
#f, offsetof(homa_config, f), 0                                                            \
    }
#define CFG64(f)                                                                                   \
    {                                                                                              \
#f, offsetof(homa_config, f), 1                                                            \
    }
static const struct cfg_field cfg_fields[] = {
    CFG32(max_message_length),
    CFG32(max_payload),
    CFG32(unsched_bytes),
    CFG32(grant_window),
    CFG32(max_incoming),
    CFG32(max_overcommit),
    CFG32(grant_fifo_permille),
    CFG32(fifo_grant_increment),
    CFG32(num_priorities),
    CFG64(tick_ns),
    CFG32(resend_ticks),
    CFG32(resend_interval),
    CFG32(timeout_ticks),
    CFG32(need_ack_ticks),
    CFG64(link_bps),
    CFG32(max_nic_queue_ns),
    CFG32(pacer_bypass_bytes),
    CFG64(max_rx_bytes),
    CFG32(max_rpcs),
    CFG32(max_ports),
    CFG32(tombstone_ticks),
    CFG32(max_tombstones),
    CFG32(gap_resend_ticks),
    CFG32(adaptive_cutoffs),
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
                             "ignore_env",   "gso", "gro",         "config",   "driver", NULL};
    int busy = -1, ignore_env = 0, gso = 1, gro = 1;
    unsigned int mtu = 0, max_payload = 0;
    unsigned long long link_bps = 0;
    const char *faults = NULL, *pcap = NULL, *driver = NULL;
    PyObject *config = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$iIIKzzpppOz", kwlist, &busy, &mtu, &max_payload,
                                     &link_bps, &faults, &pcap, &ignore_env, &gso, &gro, &config,
                                     &driver))
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
    if (driver != NULL) {
        if (strcmp(driver, "raw") == 0) {
            o.flags |= HOMA_RT_RAW;
        } else if (strcmp(driver, "udp") != 0) {
            PyErr_Format(PyExc_ValueError, "driver must be 'udp' or 'raw', not '%s'", driver);
            return -1;
        }
    }
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
    Py_BEGIN_ALLOW_THREADS rc = homa_runtime_create(&o, &rt);
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        hpy_raise_homa(rc, "Runtime");
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
    Py_BEGIN_ALLOW_THREADS homa_runtime_destroy(rt);
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
    return hpy_check_pid(self->pid, "this Runtime");
}

static PyObject *Runtime_close(RuntimeObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->rt == NULL) Py_RETURN_NONE;
    if (self->users > 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Runtime.close(): %d socket(s) or communicator(s) still open on it",
                     self->users);
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
    Py_BEGIN_ALLOW_THREADS homa_runtime_counters(self->rt, &ec, &dc);
    Py_END_ALLOW_THREADS PyObject *d = PyDict_New();
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

PyTypeObject hpy_RuntimeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "homa.Runtime",
    .tp_basicsize = sizeof(RuntimeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Runtime(*, busy_poll_us=None, mtu=0, max_payload=0, link_bps=0, faults=None,\n"
              "        pcap=None, ignore_env=False, gso=True, gro=True, config=None,\n"
              "        driver=None)\n"
              "--\n\n"
              "A libhoma runtime: one protocol engine, its UDP sockets and a background\n"
              "thread.  Sockets of one runtime share SRPT, grants and memory caps.\n\n"
              "busy_poll_us: spin this long in recv before sleeping (default 50).\n"
              "mtu / max_payload: path MTU or payload bytes per packet (0 = derive).\n"
              "link_bps: pacer link rate in bit/s (0 = no pacing).\n"
              "faults: fault-injection spec, e.g. 'drop=0.05,seed=7'.\n"
              "pcap: write every packet to this pcap file.\n"
              "driver: 'udp' (default) or 'raw' (Homa over IP protocol 146, the Linux\n"
              "  module's wire format; needs CAP_NET_RAW).  HOMA_DRIVER applies when\n"
              "  this is None and ignore_env is False.\n"
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

RuntimeObject *hpy_get_runtime(PyObject *obj)
{
    if (obj != NULL && obj != Py_None) {
        if (!PyObject_TypeCheck(obj, &hpy_RuntimeType)) {
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
        PyObject *r = PyObject_CallNoArgs((PyObject *)&hpy_RuntimeType);
        if (r == NULL) return NULL;
        default_rt = (RuntimeObject *)r;
    }
    Py_INCREF(default_rt);
    return default_rt;
}
