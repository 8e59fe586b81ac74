/*
 * Hooks between the zygote (rlm_zygote.c) and the sandbox child.
 */

#ifndef _RLM_CHILD_H_INCLUDED_
#define _RLM_CHILD_H_INCLUDED_


#define PY_SSIZE_T_CLEAN
#include <Python.h>


extern PyObject  *rlm_dispatch_fn;
extern PyObject  *rlm_configure_fn;
extern PyObject  *rlm_after_fork_fn;
extern PyObject  *rlm_prime_fn;

PyObject *rlm_child_module_init(void);
void rlm_child_install_signals(void);


#endif /* _RLM_CHILD_H_INCLUDED_ */
