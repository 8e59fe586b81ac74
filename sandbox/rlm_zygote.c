/*
 * The zygote: CPython initialised once in the manager, the allowed stdlib
 * and the REPL runtime imported, everything frozen out of the collector's
 * reach so that forked sandboxes share these pages copy-on-write.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "rlm_sandboxd.h"
#include "rlm_child.h"


/* generated from rlm_repl.py at build time (xxd -i) */
extern unsigned char  rlm_repl_py[];
extern unsigned int   rlm_repl_py_len;


static const char  *rlm_preload[] = {
    "re", "json", "math", "collections", "itertools", "functools",
    "statistics", "random", "datetime", "decimal", "fractions", "string",
    "textwrap", "heapq", "bisect", "typing", "dataclasses", "traceback",
    "ast", "linecache", "reprlib", "signal", "operator", "copy", "pprint",
    "enum", "abc", "io", "time", "types", "struct", "base64", "hashlib",
    "unicodedata", "difflib", "csv", "html", "array", "uuid", "warnings",
    "contextlib", "numbers", "zlib", "binascii", "calendar", "keyword",
    NULL
};


static int
rlm_import(const char *name, char *err, size_t errlen)
{
    PyObject  *m;

    m = PyImport_ImportModule(name);

    if (m == NULL) {
        PyErr_Clear();
        snprintf(err, errlen, "cannot import module \"%s\"", name);
        return -1;
    }

    Py_DECREF(m);
    return 0;
}


static PyObject *
rlm_load_runtime(void)
{
    char      *src;
    PyObject  *code, *mod;

    src = malloc(rlm_repl_py_len + 1);
    if (src == NULL) {
        return NULL;
    }

    memcpy(src, rlm_repl_py, rlm_repl_py_len);
    src[rlm_repl_py_len] = '\0';

    code = Py_CompileString(src, "<rlm_repl>", Py_file_input);
    free(src);

    if (code == NULL) {
        return NULL;
    }

    mod = PyImport_ExecCodeModuleEx("rlm_repl", code, "<rlm_repl>");
    Py_DECREF(code);

    return mod;
}


int
rlm_zygote_init(rlm_conf_t *conf, char *err, size_t errlen)
{
    PyConfig   config;
    PyStatus   st;
    PyObject  *rt, *gc, *r, *warm;
    unsigned   i;

    if (PyImport_AppendInittab("_rlm", rlm_child_module_init) != 0) {
        snprintf(err, errlen, "cannot register _rlm");
        return -1;
    }

    /* isolated: no environment, no site, no user paths, Debian's stdlib */

    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    config.install_signal_handlers = 0;
    config.write_bytecode = 0;
    config.user_site_directory = 0;
    config.parse_argv = 0;
    config.buffered_stdio = 0;

    st = PyConfig_SetString(&config, &config.home, L"/usr");
    if (!PyStatus_Exception(st)) {
        st = PyConfig_SetString(&config, &config.program_name,
                                L"rlm-sandbox");
    }

    if (!PyStatus_Exception(st)) {
        st = Py_InitializeFromConfig(&config);
    }

    PyConfig_Clear(&config);

    if (PyStatus_Exception(st)) {
        snprintf(err, errlen, "python init: %s",
                 st.err_msg ? st.err_msg : "failed");
        return -1;
    }

    for (i = 0; rlm_preload[i] != NULL; i++) {
        if (rlm_import(rlm_preload[i], err, errlen) != 0) {
            return -1;
        }
    }

    for (i = 0; i < conf->nallow; i++) {
        if (rlm_import(conf->allow[i], err, errlen) != 0) {
            return -1;
        }
    }

    rt = rlm_load_runtime();
    if (rt == NULL) {
        PyErr_Print();
        snprintf(err, errlen, "cannot load the REPL runtime");
        return -1;
    }

    rlm_dispatch_fn = PyObject_GetAttrString(rt, "dispatch");
    rlm_configure_fn = PyObject_GetAttrString(rt, "configure");
    rlm_after_fork_fn = PyObject_GetAttrString(rt, "after_fork");
    rlm_prime_fn = PyObject_GetAttrString(rt, "prime");
    warm = PyObject_GetAttrString(rt, "warm_up");
    Py_DECREF(rt);

    if (rlm_dispatch_fn == NULL || rlm_configure_fn == NULL
        || rlm_after_fork_fn == NULL || rlm_prime_fn == NULL
        || warm == NULL)
    {
        Py_XDECREF(warm);
        PyErr_Clear();
        snprintf(err, errlen, "REPL runtime lacks its entry points");
        return -1;
    }

    rlm_child_install_signals();

    /*
     * The runtime's own cells, run here once so that the first cell of a
     * session does not pay for (and copy the pages of) bytecode
     * specialisation and first-use caches; see warm_up() in rlm_repl.py.
     */

    r = PyObject_CallNoArgs(warm);
    Py_DECREF(warm);

    if (r == NULL) {
        PyErr_Print();
        snprintf(err, errlen, "REPL runtime warm-up failed");
        return -1;
    }

    Py_DECREF(r);

    /*
     * Everything allocated so far is long-lived: move it to the permanent
     * generation so a collection in a sandbox never writes to (and so
     * copies) these pages.
     */

    gc = PyImport_ImportModule("gc");
    if (gc == NULL) {
        PyErr_Clear();
        snprintf(err, errlen, "cannot import gc");
        return -1;
    }

    r = PyObject_CallMethod(gc, "collect", NULL);
    Py_XDECREF(r);
    r = PyObject_CallMethod(gc, "freeze", NULL);
    Py_XDECREF(r);
    Py_DECREF(gc);

    if (PyErr_Occurred()) {
        PyErr_Clear();
        snprintf(err, errlen, "gc.freeze failed");
        return -1;
    }

    return 0;
}
