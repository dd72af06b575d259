/* SPDX-License-Identifier: MIT */
/*
** pyapi.h -- CPython's C API as the preload library uses it: functions
** found with dlsym in the running process, so that nothing is linked and a
** program without Python finds none (one failed lookup at start). Only
** functions of the C API that 3.9 to 3.13 all export are used; no
** structure layout is read. callsite.c reads frames through them and
** pyrecord.c runs the recording's Python side.
*/
#ifndef VRAM_PRELOAD_PYAPI_H
#define VRAM_PRELOAD_PYAPI_H

#include <stdbool.h>
#include <sys/types.h>

typedef int (*pyfn_int_void)(void);
typedef void *(*pyfn_ptr_void)(void);
typedef void *(*pyfn_ptr_ptr)(void *);
typedef int (*pyfn_int_ptr)(void *);
typedef void (*pyfn_void_ptr)(void *);
typedef void *(*pyfn_getattr)(void *, const char *);
typedef const char *(*pyfn_utf8)(void *, ssize_t *);
typedef void *(*pyfn_from_utf8)(const char *, ssize_t);
typedef int (*pyfn_addr2line)(void *, int);
typedef void (*pyfn_void_void)(void);
typedef void (*pyfn_fetch)(void **, void **, void **);
typedef void (*pyfn_restore)(void *, void *, void *);
typedef int (*pyfn_profile)(void *, void *, int, void *); /* Py_tracefunc */
typedef void (*pyfn_setprofile)(pyfn_profile, void *);
typedef int (*pyfn_pending)(int (*)(void *), void *);
typedef void *(*pyfn_import)(const char *);
typedef void *(*pyfn_call_method)(void *, const char *, const char *, ...);
typedef void *(*pyfn_call_objargs)(void *, ...);
typedef void *(*pyfn_cfunction_new)(void *, void *, void *);

/* The functions, each NULL where the process has none. */
struct pyapi {
    bool ready;                    /* the frame readers are all there */
    pyfn_int_void is_initialized;  /* Py_IsInitialized */
    pyfn_int_void gil_check;       /* PyGILState_Check */
    pyfn_ptr_void get_frame;       /* PyEval_GetFrame: borrowed */
    pyfn_ptr_ptr frame_code;       /* PyFrame_GetCode: new reference */
    pyfn_ptr_ptr frame_back;       /* PyFrame_GetBack: new reference or NULL */
    pyfn_int_ptr frame_lasti;      /* PyFrame_GetLasti (3.11+), or NULL */
    pyfn_int_ptr frame_line;       /* PyFrame_GetLineNumber */
    pyfn_addr2line code_addr2line; /* PyCode_Addr2Line */
    pyfn_void_ptr incref, decref;  /* Py_IncRef, Py_DecRef */
    pyfn_getattr getattr;          /* PyObject_GetAttrString */
    pyfn_utf8 as_utf8;             /* PyUnicode_AsUTF8AndSize */
    pyfn_from_utf8 from_utf8;      /* PyUnicode_FromStringAndSize */
    pyfn_ptr_ptr str;              /* PyObject_Str: new reference */
    pyfn_void_void err_clear_fn;   /* PyErr_Clear */
    pyfn_fetch err_fetch;          /* PyErr_Fetch: the program's own exception, */
    pyfn_restore err_restore;      /* PyErr_Restore: put back as it was */
    pyfn_setprofile set_profile;   /* PyEval_SetProfile: this thread */
    pyfn_setprofile set_profile_all; /* PyEval_SetProfileAllThreads (3.12+) */
    pyfn_pending add_pending;      /* Py_AddPendingCall */
    pyfn_import import;            /* PyImport_ImportModule */
    pyfn_call_method call_method;  /* PyObject_CallMethod */
    pyfn_call_objargs call_objargs; /* PyObject_CallFunctionObjArgs */
    pyfn_cfunction_new cfunction_new; /* PyCFunction_NewEx */
    pyfn_ptr_ptr object_type;      /* PyObject_Type: new reference */
    void *function_type;           /* &PyFunction_Type */
    void *method_type;             /* &PyMethod_Type */
    void *none;                    /* &_Py_NoneStruct */
};

extern struct pyapi py;

/* Find CPython's functions into py; run once, before any is used. */
void pyapi_find(void);

/* CPython's PyMethodDef, as the stable ABI fixes it. */
struct py_method_def {
    const char *name;
    void *meth;
    int flags;
    const char *doc;
};
#define PY_METH_FASTCALL 0x0080

/* PyTrace_C_CALL and PyTrace_RETURN: CPython's values, the same in every
** version that has the events. */
#define PY_TRACE_C_CALL 4
#define PY_TRACE_RETURN 3

#endif
