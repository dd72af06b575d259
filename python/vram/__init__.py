# SPDX-License-Identifier: MIT
"""vram -- libvram's memory statistics and phase marks for Python programs.

Pure ctypes over libvram.so, nothing to compile (docs/PYTHON.md):

    pip install ./python                  # or: PYTHONPATH=python python3 train.py

    import vram
    vram.get_memory_info(0)        # {"current": bytes, "peak": bytes}
    vram.reset_memory_stats(0)     # the peak starts again from "current"
    vram.mark("epoch 3")           # a mark in the allocation trace (VRAM_TRACE)
    vram.stats(0)                  # every field of vram_stats, by name

Which allocations are counted: when PyTorch allocates through vram's plug-in
(torch.cuda.memory.CUDAPluggableAllocator over libvram.so), the plug-in's
device for that CUDA ordinal -- so the figures are what PyTorch allocated.
Otherwise a context of this package, opened on first use from the
environment (vram_open(NULL): VRAM_BACKEND, VRAM_STRATEGY, VRAM_TRACE, ...),
and DEVICE is its logical device index.

The library is VRAM_LIBRARY if set, else libvram.so beside this file, else
build/lib/libvram.so of the checkout this package sits in, else the
installed one (the dynamic linker's search path, then the usual library
directories); the error names every place looked at. With the plug-in, it must be the same file PyTorch was given, so that
both share one library (and so one plug-in context).

Every failure raises VramError with libvram's one-line explanation.
"""

import atexit
import ctypes
import ctypes.util
import os
import platform
import sys
import sysconfig
import threading

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "VramError",
    "get_memory_info",
    "reset_memory_stats",
    "release_idle",
    "mark",
    "stats",
    "close",
    "use_torch_plugin",
    "library",
    "device_handle",
    "MemoryCallback",
    "StepMemoryHook",
    "track",
]

# The fields of vram_stats, in the order of VRAM_STATS_LIST (include/vram.h).
# The library's sizeof(vram_stats) is checked against this at load time, and
# tests/python/test_vram.py checks the names and order against the header.
STATS_FIELDS = (
    ("bytes_in_use", ctypes.c_uint64),
    ("peak_bytes_in_use", ctypes.c_uint64),
    ("bytes_requested", ctypes.c_uint64),
    ("bytes_reserved", ctypes.c_uint64),
    ("peak_bytes_reserved", ctypes.c_uint64),
    ("bytes_limit", ctypes.c_uint64),
    ("largest_free_block", ctypes.c_uint64),
    ("live_blocks", ctypes.c_uint64),
    ("regions", ctypes.c_uint64),
    ("num_allocs", ctypes.c_uint64),
    ("num_frees", ctypes.c_uint64),
    ("num_ooms", ctypes.c_uint64),
    ("backend_calls", ctypes.c_uint64),
    ("metadata_bytes", ctypes.c_uint64),
    ("fragmentation", ctypes.c_double),
    ("maps", ctypes.c_uint64),
    ("unmaps", ctypes.c_uint64),
    ("modelled_driver_ns", ctypes.c_uint64),
    ("peak_live_blocks", ctypes.c_uint64),
    ("bytes_allocated_total", ctypes.c_uint64),
    ("bytes_freed_total", ctypes.c_uint64),
    ("alloc_retries", ctypes.c_uint64),
    ("bytes_pending", ctypes.c_uint64),
)


class _Stats(ctypes.Structure):
    _fields_ = list(STATS_FIELDS)


class _MemoryInfo(ctypes.Structure):
    _fields_ = [("current", ctypes.c_uint64), ("peak", ctypes.c_uint64)]


class VramError(RuntimeError):
    """A libvram call failed.

    str(error) is libvram's one-line explanation (vram_last_error());
    .status is the vram_status number and .name its symbol ("VRAM_E_OOM").
    """

    def __init__(self, message, status=None, name=None):
        super().__init__(message)
        self.status = status
        self.name = name


# ---------------------------------------------------------------------------
# The library
# ---------------------------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT_LIBRARY = os.path.normpath(os.path.join(_HERE, "..", "..", "build", "lib", "libvram.so"))

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_S = ctypes.c_int  # vram_status

# name: (result type, argument types)
_PROTOTYPES = {
    "vram_strerror": (ctypes.c_char_p, [_S]),
    "vram_status_name": (ctypes.c_char_p, [_S]),
    "vram_last_error": (ctypes.c_char_p, []),
    "vram_open": (_S, [_P, _PP]),
    "vram_close": (None, [_P]),
    "vram_device_count": (_S, [_P, ctypes.POINTER(ctypes.c_int)]),
    "vram_device_get": (_S, [_P, ctypes.c_int, _PP]),
    "vram_alloc": (_S, [_P, ctypes.c_size_t, _P, _PP]),
    "vram_free": (_S, [_P, _P]),
    "vram_get_memory_info": (_S, [_P, ctypes.POINTER(_MemoryInfo)]),
    "vram_get_stats": (_S, [_P, ctypes.POINTER(_Stats)]),
    "vram_stats_size": (ctypes.c_size_t, []),
    "vram_reset_peak": (_S, [_P]),
    "vram_release_idle": (_S, [_P, ctypes.POINTER(ctypes.c_uint64)]),
    "vram_mark": (_S, [ctypes.c_char_p]),
    "vram_torch_device": (_S, [ctypes.c_int, _PP]),
}


class _State:
    """The process's use of libvram; every field is guarded by LOCK."""

    def __init__(self):
        self.lock = threading.RLock()
        self.lib = None  # the loaded CDLL
        self.ctx = None  # this package's vram_context *, or None
        self.devices = {}  # logical index -> vram_device * of ctx
        self.torch = None  # True/False: forced by use_torch_plugin; None: detect


_state = _State()


# The library's file name at run time (its SONAME, set in CMakeLists.txt).
_SONAME = "libvram.so.0"


def _system_libdirs():
    """Where an installed libvram.so is, in search order: this Python's
    prefix (a virtual or conda environment vram was installed into), then
    /usr/local and /usr, multiarch directories (Debian:
    lib/x86_64-linux-gnu) first."""
    arch = sysconfig.get_config_var("MULTIARCH") or "%s-linux-gnu" % platform.machine()
    dirs = [os.path.join(sys.prefix, "lib")]
    for prefix in ("/usr/local", "/usr"):
        dirs += [os.path.join(prefix, "lib", arch), os.path.join(prefix, "lib64"),
                 os.path.join(prefix, "lib")]
    seen = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _library_path():
    """The path of libvram.so to load: VRAM_LIBRARY if set; else the first
    that exists of the package's own directory (a copy of the library beside
    __init__.py), the checkout's build/lib, the dynamic linker's search path
    (ctypes.util.find_library) and the usual installed library directories.
    Raises VramError naming every place looked at when there is none."""
    path = os.environ.get("VRAM_LIBRARY", "")
    if path:
        return path
    looked = ["VRAM_LIBRARY (unset)"]
    candidates = [os.path.join(_HERE, _SONAME), os.path.join(_HERE, "libvram.so")]
    if os.path.exists(os.path.join(_HERE, "..", "..", "CMakeLists.txt")):  # a checkout
        candidates.append(_CHECKOUT_LIBRARY)
    for path in candidates:
        if os.path.exists(path):
            return path
        looked.append(path)
    libdirs = _system_libdirs()
    found = ctypes.util.find_library("vram")
    if found:
        # A full path where one exists: PyTorch's plug-in and messages need one.
        for d in libdirs:
            if os.path.exists(os.path.join(d, found)):
                return os.path.join(d, found)
        return found
    looked.append("the dynamic linker's search path (ldconfig -p)")
    for d in libdirs:
        for name in (_SONAME, "libvram.so"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
        looked.append(os.path.join(d, _SONAME))
    raise VramError(
        "libvram not found; looked at: %s. Install vram (the Debian package, or "
        "'make install'), or set VRAM_LIBRARY to the path of libvram.so"
        % ", ".join(looked)
    )


def library():
    """The loaded libvram (a ctypes.CDLL with argument and result types set).

    For advanced use (vram_alloc and vram_free in tests). Loads it on first
    call; raises VramError if it cannot be found or does not match this
    package (its vram_stats has another size).
    """
    with _state.lock:
        if _state.lib is not None:
            return _state.lib
        path = _library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise VramError("cannot load %s: %s" % (path, e)) from None
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise VramError("%s has no %s: an older libvram?" % (path, name)) from None
            fn.restype = restype
            fn.argtypes = argtypes
        size = lib.vram_stats_size()
        if size != ctypes.sizeof(_Stats):
            raise VramError(
                "%s: vram_stats is %d bytes, this package expects %d: the package "
                "and the library are from different versions" % (path, size, ctypes.sizeof(_Stats))
            )
        _state.lib = lib
        return lib


def _check(lib, status, what):
    """Raise VramError for a failed STATUS of the call WHAT."""
    if status == 0:
        return
    raw = lib.vram_last_error() or b""
    message = raw.decode("utf-8", "replace")
    if not message:
        message = "%s: %s" % (what, (lib.vram_strerror(status) or b"?").decode())
    name = lib.vram_status_name(status)
    raise VramError(message, status, name.decode() if name else None)


# ---------------------------------------------------------------------------
# Which device: the PyTorch plug-in's, or this package's context
# ---------------------------------------------------------------------------


def use_torch_plugin(enabled=True):
    """Choose where the figures come from: True, the PyTorch plug-in's
    devices (vram_torch_device); False, this package's own context; None,
    detect (the default: the plug-in when PyTorch's current CUDA allocator
    is a pluggable one)."""
    with _state.lock:
        _state.torch = enabled


def _torch_plugin_in_use():
    if _state.torch is not None:
        return _state.torch
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        backend = getattr(torch.cuda.memory, "get_allocator_backend", None)
        return backend is not None and backend() == "pluggable"
    except Exception:  # no CUDA build, an old PyTorch: not the plug-in
        return False


def _open_locked(lib):
    if _state.ctx is None:
        ctx = ctypes.c_void_p()
        _check(lib, lib.vram_open(None, ctypes.byref(ctx)), "vram_open")
        _state.ctx = ctx
    return _state.ctx


def device_handle(device=0):
    """The vram_device * (as a ctypes.c_void_p) behind DEVICE: the PyTorch
    plug-in's device for CUDA ordinal DEVICE when it is in use, else logical
    device DEVICE of this package's context (opened on first use). For
    advanced use with library()."""
    device = int(device)
    lib = library()
    with _state.lock:
        if _torch_plugin_in_use():
            dev = ctypes.c_void_p()
            _check(lib, lib.vram_torch_device(device, ctypes.byref(dev)), "vram_torch_device")
            return dev
        dev = _state.devices.get(device)
        if dev is None:
            ctx = _open_locked(lib)
            dev = ctypes.c_void_p()
            _check(lib, lib.vram_device_get(ctx, device, ctypes.byref(dev)), "vram_device_get")
            _state.devices[device] = dev
        return dev


def close():
    """Close this package's context, if open: its trace (VRAM_TRACE) is
    flushed and closed, and every handle from device_handle() becomes
    invalid. The next call opens a new one from the environment. The
    PyTorch plug-in's context is not affected. Also run at exit."""
    with _state.lock:
        if _state.ctx is not None and _state.lib is not None:
            _state.lib.vram_close(_state.ctx)
        _state.ctx = None
        _state.devices = {}


# ---------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------


def get_memory_info(device=0):
    """{"current": bytes in use now, "peak": their peak} on DEVICE, as
    TensorFlow's tf.config.experimental.get_memory_info returns them."""
    lib = library()
    info = _MemoryInfo()
    _check(lib, lib.vram_get_memory_info(device_handle(device), ctypes.byref(info)),
           "vram_get_memory_info")
    return {"current": int(info.current), "peak": int(info.peak)}


def reset_memory_stats(device=0):
    """Set DEVICE's peaks (in use and reserved) to their current values."""
    lib = library()
    _check(lib, lib.vram_reset_peak(device_handle(device)), "vram_reset_peak")


def release_idle(device=0):
    """Give DEVICE's idle memory back to the driver (vram_release_idle; what
    torch.cuda.empty_cache() does for PyTorch's own allocator) and return the
    bytes given back: expandable unmaps and releases the physical units no
    live block uses, growth gives wholly free regions back, preallocate keeps
    its one region (0). Memory still used by work queued on another stream
    is kept until that work is done."""
    lib = library()
    n = ctypes.c_uint64(0)
    _check(lib, lib.vram_release_idle(device_handle(device), ctypes.byref(n)),
           "vram_release_idle")
    return int(n.value)


def stats(device=0):
    """Every statistic of DEVICE (vram_get_stats) as a dict: integers in
    bytes, blocks or calls, and fragmentation as a float."""
    lib = library()
    s = _Stats()
    _check(lib, lib.vram_get_stats(device_handle(device), ctypes.byref(s)), "vram_get_stats")
    return {name: getattr(s, name) for name, _ in STATS_FIELDS}


def _recorded():
    """Whether `vram record` records this process (its preload library
    writes VRAM_TRACE): VRAM_TRACE_HOLDERS is its sign."""
    return bool(os.environ.get("VRAM_TRACE_HOLDERS")) and bool(os.environ.get("VRAM_TRACE"))


def mark(label):
    """Mark a phase ("epoch 3", "step 120") in the trace of every open
    context that records one (VRAM_TRACE). Commas, quotes and control
    characters become spaces; the label is cut at 128 bytes. Does nothing
    when no trace is recorded. Raises VramError for an empty label or when
    writing the trace fails.

    So that the mark is not lost before the first allocation, the context
    that would record it is opened first: the plug-in's when PyTorch uses
    it, else this package's when VRAM_TRACE is set.

    Under `vram record` (the preload library's recording of a program that
    need not use libvram) the mark goes into that recording too, once the
    program has made its first GPU allocation, and what holds each live
    allocation may be named there (docs/RECORD.md)."""
    text = label if isinstance(label, bytes) else str(label).encode("utf-8")
    recording = getattr(sys, "_vram_record", None)
    if (recording is not None or _recorded()) and text:
        label = text.decode("utf-8", "replace")
        if recording is not None:
            recording.mark(label)
        else:
            # Before the program's first GPU allocation the recording's
            # Python side is not there yet: it writes these first.
            pending = sys.__dict__.setdefault("_vram_pending_marks", [])
            if len(pending) < 10000:
                pending.append(label)
        # VRAM_TRACE is the recording's file: no context of this package is
        # opened on it; contexts the program opened get the mark.
        with _state.lock:
            lib = _state.lib
        if lib is not None:
            _check(lib, lib.vram_mark(text), "vram_mark")
        return
    lib = library()
    with _state.lock:
        if _torch_plugin_in_use():
            dev = ctypes.c_void_p()
            lib.vram_torch_device(0, ctypes.byref(dev))  # best effort: opens it
        elif os.environ.get("VRAM_TRACE"):
            _open_locked(lib)
    _check(lib, lib.vram_mark(text), "vram_mark")


atexit.register(close)

from .callbacks import StepMemoryHook, track  # noqa: E402,F401


def __getattr__(name):  # PEP 562: vram.MemoryCallback, made on first use
    if name == "MemoryCallback":
        from .callbacks import memory_callback_class

        return memory_callback_class()
    raise AttributeError("module 'vram' has no attribute %r" % (name,))
