/* SPDX-License-Identifier: MIT */
/*
** pyapi.c -- CPython's C API found in the running process (pyapi.h).
*/
#include <dlfcn.h>
#include <string.h>

#include "preload/pyapi.h"

struct pyapi py;

/* NAME's address into the function pointer at FIELD (NULL if none);
** through memcpy, as ISO C converts no object pointer to a function's. */
static void
find(void *field, const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    memcpy(field, &p, sizeof p);
}

void
pyapi_find(void)
{
    find(&py.is_initialized, "Py_IsInitialized");
    if (py.is_initialized == NULL)
        return;
    find(&py.gil_check, "PyGILState_Check");
    find(&py.get_frame, "PyEval_GetFrame");
    find(&py.frame_code, "PyFrame_GetCode");
    find(&py.frame_back, "PyFrame_GetBack");
    find(&py.frame_lasti, "PyFrame_GetLasti");
    find(&py.frame_line, "PyFrame_GetLineNumber");
    find(&py.code_addr2line, "PyCode_Addr2Line");
    find(&py.incref, "Py_IncRef");
    find(&py.decref, "Py_DecRef");
    find(&py.getattr, "PyObject_GetAttrString");
    find(&py.as_utf8, "PyUnicode_AsUTF8AndSize");
    find(&py.from_utf8, "PyUnicode_FromStringAndSize");
    find(&py.str, "PyObject_Str");
    find(&py.err_clear_fn, "PyErr_Clear");
    find(&py.err_fetch, "PyErr_Fetch");
    find(&py.err_restore, "PyErr_Restore");
    find(&py.set_profile, "PyEval_SetProfile");
    find(&py.set_profile_all, "PyEval_SetProfileAllThreads");
    find(&py.add_pending, "Py_AddPendingCall");
    find(&py.import, "PyImport_ImportModule");
    find(&py.call_method, "PyObject_CallMethod");
    find(&py.call_objargs, "PyObject_CallFunctionObjArgs");
    find(&py.cfunction_new, "PyCFunction_NewEx");
    find(&py.object_type, "PyObject_Type");
    py.function_type = dlsym(RTLD_DEFAULT, "PyFunction_Type");
    py.method_type = dlsym(RTLD_DEFAULT, "PyMethod_Type");
    py.none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
    py.ready = py.gil_check != NULL && py.get_frame != NULL && py.frame_code != NULL &&
               py.frame_back != NULL && py.frame_line != NULL && py.incref != NULL &&
               py.decref != NULL && py.getattr != NULL && py.as_utf8 != NULL &&
               py.err_clear_fn != NULL && py.err_fetch != NULL && py.err_restore != NULL &&
               (py.frame_lasti == NULL || py.code_addr2line != NULL);
}
