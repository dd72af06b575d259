# SPDX-License-Identifier: MIT
"""vram as PyTorch's CUDA allocator, with every hook PyTorch offers.

    import vram.torch
    vram.torch.use(strategy="expandable")   # before the first CUDA tensor
    # ... ordinary PyTorch ...

use() builds torch.cuda.memory.CUDAPluggableAllocator over libvram.so
(vram_torch_malloc, vram_torch_free) and, before making it PyTorch's
allocator, installs on PyTorch's allocator object every hook vram needs:

    set_record_stream_fn          Tensor.record_stream: a freed tensor's memory
                                  is not reused while another stream may still
                                  read it (DDP/FSDP communication, pinned-memory
                                  copies, side streams)
    set_memory_fraction_fn        torch.cuda.set_per_process_memory_fraction
    set_base_alloc_fn             CUDA IPC (torch.multiprocessing) of tensors
    set_begin_allocate_to_pool,   CUDA graphs (torch.cuda.graph, torch.compile
    set_end_allocate_to_pool_fn,  mode="reduce-overhead"): the graph's memory
    set_release_pool              serves nothing else until the graph is gone
    set_reset_fn                  torch.cuda.empty_cache, where the library
                                  has vram_torch_empty_cache

A PyTorch without set_record_stream_fn is refused (results would be silently
wrong with side streams); one without the graph-pool hooks gets a warning
that CUDA graphs must not be captured.

PyTorch's own memory statistics answer with vram's figures
(install_memory_api): torch.cuda.memory_allocated, max_memory_allocated,
memory_reserved, max_memory_reserved, memory_stats, memory_summary and
reset_peak_memory_stats, as training loops and their loggers read them.

Past the cap, PyTorch raises torch.OutOfMemoryError carrying vram's one-line
explanation. CUDAPluggableAllocator does not check the pointer its
allocation function returns (a NULL becomes a tensor at address 0, and the
first kernel to touch it kills the CUDA context), so the allocation function
PyTorch is given is vram_torch_malloc_raising, from a small C++ shim
(oom_shim.cpp) that throws c10::OutOfMemoryError as PyTorch's own caching
allocator does. use() compiles it once against the PyTorch in use and
libvram.so (a C++ compiler is needed; the result is cached next to
libvram.so, else in ~/.cache/vram); without a compiler it warns and plugs
vram_torch_malloc in as before. A cached shim is code loaded into the
process, so a cache directory or file that is a symbolic link, is not the
user's or root's, or that its group or others may write, is not used (one
warning says which and why).
"""

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import warnings

from . import VramError, _library_path

__all__ = ["use", "HOOKS", "oom_shim", "empty_cache", "install_memory_api", "memory_stats"]

# (setter on PyTorch's allocator object, vram's entry point, required)
HOOKS = (
    ("set_record_stream_fn", "vram_torch_record_stream", True),
    ("set_memory_fraction_fn", "vram_torch_set_memory_fraction", False),
    ("set_base_alloc_fn", "vram_torch_base_alloc", False),
    ("set_begin_allocate_to_pool", "vram_torch_begin_allocate_to_pool", False),
    ("set_end_allocate_to_pool_fn", "vram_torch_end_allocate_to_pool", False),
    ("set_release_pool", "vram_torch_release_pool", False),
    ("set_reset_fn", "vram_torch_empty_cache", False),
)

_GRAPH_SETTERS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")

# The allocator in use: PyTorch keeps only a C++ reference, and the Python
# object must outlive every tensor.
_current = None


def _address(lib, symbol):
    """The address of SYMBOL in LIB, or None when the library lacks it."""
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


_SHIM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oom_shim.cpp")


def _shim_dirs(lib_path):
    """Where a compiled shim may be cached, most preferred first."""
    dirs = []
    if os.path.isabs(lib_path):
        dirs.append(os.path.join(os.path.dirname(lib_path), "vram-torch-shim"))
    dirs.append(os.path.join(os.path.expanduser("~"), ".cache", "vram"))
    return dirs


def _unsafe(path, directory):
    """Why PATH (a cache DIRECTORY, or a cached shim) must not be used, or
    None. A shim is loaded into the process: whoever can write it, or
    replace it in its directory, runs code as the user. So each must be
    itself (not a symbolic link), the user's or root's, and writable by
    neither its group nor others."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return "%s: %s" % (path, e.strerror)
    kind = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind:
        return "%s is not a %s" % (path, "directory" if directory else "regular file")
    if st.st_uid not in (os.geteuid(), 0):
        return "%s is owned by uid %d, not by you (uid %d) or root" % (
            path, st.st_uid, os.geteuid())
    if st.st_mode & 0o022:
        return "%s is writable by %s (mode %04o)" % (
            path, "others" if st.st_mode & 0o002 else "its group",
            stat.S_IMODE(st.st_mode))
    return None


def _refuse_cache(why):
    """One line saying that a cache is not used, and why."""
    warnings.warn("vram: the PyTorch OOM shim cache is not used: %s" % why, RuntimeWarning,
                  stacklevel=3)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def oom_shim(torch, lib_path, compiler=None):
    """The path of the OOM shim (oom_shim.cpp) built for TORCH and LIB_PATH
    (libvram.so), compiling it on first use. Raises VramError saying why
    when it cannot be built (no C++ compiler, no PyTorch headers)."""
    root = os.path.dirname(os.path.abspath(getattr(torch, "__file__", "") or "."))
    include = os.path.join(root, "include")
    libdir = os.path.join(root, "lib")
    if not os.path.isdir(os.path.join(include, "c10")):
        raise VramError("no PyTorch C++ headers under %s" % include)
    cxx = compiler or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        raise VramError("no C++ compiler (c++, g++, clang++) on PATH")
    with open(_SHIM_SOURCE, "rb") as f:
        source = f.read()
    abi = int(bool(getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", True)))
    try:
        stamp = os.stat(lib_path).st_mtime_ns if os.path.isabs(lib_path) else 0
    except OSError:
        stamp = 0
    key = hashlib.sha256(repr((source, torch.__version__, root, abi, lib_path, stamp,
                               cxx)).encode()).hexdigest()[:16]
    name = "libvram_torch_oom-%s.so" % key
    unsafe = set()
    for d in _shim_dirs(lib_path):
        if not os.path.lexists(d):
            continue
        why = _unsafe(d, True)
        if why is not None:
            _refuse_cache(why)
            unsafe.add(d)
        elif os.path.lexists(os.path.join(d, name)):
            why = _unsafe(os.path.join(d, name), False)
            if why is None:
                return os.path.join(d, name)
            _refuse_cache(why + "; it is built again")
    if os.path.isabs(lib_path):
        link = [lib_path, "-Wl,-rpath," + os.path.dirname(lib_path)]
    else:
        link = ["-l:" + lib_path]
    errors = []
    for d in _shim_dirs(lib_path):
        if d in unsafe:
            errors.append("%s: not safe (said above)" % d)
            continue
        try:
            try:
                os.makedirs(d, mode=0o755)
                os.chmod(d, 0o755)  # not group-writable, whatever the umask
            except FileExistsError:
                pass  # made by an earlier run, or a rank compiling at once
            why = _unsafe(d, True)
            if why is not None:
                _refuse_cache(why)
                errors.append("%s: not safe" % d)
                continue
            fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=d)
            os.close(fd)
        except OSError as e:
            errors.append("%s: %s" % (d, e))
            continue
        # C++17 is what PyTorch's headers needed up to 2.11; a later PyTorch
        # may need C++20, so that is tried next.
        for std in ("-std=c++17", "-std=c++20"):
            cmd = [cxx, std, "-O2", "-shared", "-fPIC", "-w",
                   "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, "-I", include, _SHIM_SOURCE,
                   "-o", tmp] + link + ["-L", libdir, "-lc10", "-Wl,-rpath," + libdir]
            try:
                run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     universal_newlines=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as e:
                _remove(tmp)
                raise VramError("compiling %s failed: %s" % (_SHIM_SOURCE, e)) from None
            if run.returncode == 0:
                break
        if run.returncode != 0:
            _remove(tmp)  # the compiler may have removed it already
            lines = run.stdout.strip().splitlines()
            errors = [l for l in lines if "error" in l] or lines
            raise VramError("compiling %s failed: %s" % (
                _SHIM_SOURCE, errors[0] if errors else "exit %d" % run.returncode))
        final = os.path.join(d, name)
        os.chmod(tmp, 0o755)  # the linker made it by the umask: no group write
        os.replace(tmp, final)  # atomic: ranks compiling at once agree
        return final
    raise VramError("no writable directory for the shim: " + "; ".join(errors))


def empty_cache():
    """torch.cuda.empty_cache() for vram, callable directly: give idle memory
    back to the driver on every device the plug-in has opened
    (vram_torch_empty_cache; vram.release_idle(device) does one device and
    returns the bytes). PyTorch's own torch.cuda.empty_cache() calls the same
    through set_reset_fn."""
    import vram

    fn = vram.library().vram_torch_empty_cache
    fn.restype = None
    fn.argtypes = []
    fn()


# ---------------------------------------------------------------------------
# PyTorch's memory API, answered with vram's figures
# ---------------------------------------------------------------------------
#
# PyTorch's CUDAPluggableAllocator carries no statistic: its getDeviceStats,
# resetPeakStats, resetAccumulatedStats, snapshot and recordHistory raise
# "CUDAPluggableAllocator does not yet support ..." (PyTorch 2.0 to 2.11; 1.13
# has no pluggable allocator at all), and its allocator object has no setter
# for them. So install_memory_api() replaces, at the Python level, the
# functions every statistic of torch.cuda goes through:
#
#   torch.cuda.memory_stats_as_nested_dict  (memory_stats, memory_allocated,
#     max_memory_allocated, memory_reserved, max_memory_reserved,
#     memory_summary and memory_cached call it, by the module's globals)
#   torch.cuda.reset_peak_memory_stats      (reset_max_memory_allocated and
#     reset_max_memory_cached call it)
#   torch.cuda.reset_accumulated_memory_stats
#   torch.cuda.memory._record_memory_history, _snapshot, _dump_snapshot and
#     memory_snapshot: a VramError saying how to get a snapshot instead
#
# each both as torch.cuda.NAME and torch.cuda.memory.NAME, and the _C
# functions behind them (torch._C._cuda_memoryStats, _cuda_resetPeakMemoryStats,
# _cuda_resetAccumulatedMemoryStats), which other code may call directly.
# C++ callers of the allocator's getDeviceStats (none in the Python API) still
# get PyTorch's error.
#
# Which of vram's figures (vram_stats, include/vram.h) each key holds is the
# table _FIGURES below; docs/PYTHON.md has it for users.

# key: (current, peak, allocated, freed), each a vram_stats field, a
# function of the stats dict S, or 0 (vram keeps no such figure).
_FIGURES = {
    "allocated_bytes": ("bytes_in_use", "peak_bytes_in_use", "bytes_allocated_total",
                        "bytes_freed_total"),
    "active_bytes": (lambda s: s["bytes_in_use"] + s["bytes_pending"],
                     lambda s: max(s["peak_bytes_in_use"], s["bytes_in_use"] + s["bytes_pending"]),
                     "bytes_allocated_total",
                     lambda s: s["bytes_allocated_total"] - s["bytes_in_use"] - s["bytes_pending"]),
    "requested_bytes": ("bytes_requested", "bytes_requested", 0, 0),
    "reserved_bytes": ("bytes_reserved", "peak_bytes_reserved", 0, 0),
    "inactive_split_bytes": (
        lambda s: max(s["bytes_reserved"] - s["bytes_in_use"] - s["bytes_pending"], 0),
        lambda s: max(s["bytes_reserved"] - s["bytes_in_use"] - s["bytes_pending"], 0), 0, 0),
    "allocation": ("live_blocks", "peak_live_blocks", "num_allocs", "num_frees"),
    "active": ("live_blocks", "peak_live_blocks", "num_allocs", "num_frees"),
    "segment": ("regions", "regions", 0, 0),
    "inactive_split": (0, 0, 0, 0),
}
# The accumulated figures reset_accumulated_memory_stats starts again from 0.
_ACCUMULATED = ("bytes_allocated_total", "bytes_freed_total", "num_allocs", "num_frees",
                "num_ooms", "alloc_retries")

_baseline = {}  # device -> {field: value at the last reset_accumulated_memory_stats}


def _plugin_stats(device):
    """vram_get_stats of the plug-in's device for CUDA ordinal DEVICE, as a
    dict, accumulated figures counted from the last reset."""
    import vram

    lib = vram.library()
    dev = ctypes.c_void_p()
    vram._check(lib, lib.vram_torch_device(int(device), ctypes.byref(dev)), "vram_torch_device")
    st = vram._Stats()
    vram._check(lib, lib.vram_get_stats(dev, ctypes.byref(st)), "vram_get_stats")
    s = {name: getattr(st, name) for name, _ in vram.STATS_FIELDS}
    for name, value in _baseline.get(int(device), {}).items():
        s[name] = max(s[name] - value, 0)
    return s


def _figure(spec, s):
    if callable(spec):
        return int(spec(s))
    if isinstance(spec, str):
        return int(s[spec])
    return int(spec)


def nested_stats(s):
    """PyTorch's nested memory statistics (the dict of
    torch.cuda.memory_stats_as_nested_dict) from S, a dict of vram_stats
    fields (vram.stats()); all zero for None. vram has one pool: its
    figures are under "all" and "large_pool", "small_pool" is zero."""
    zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    out = {}
    for key, specs in _FIGURES.items():
        fam = dict(zero)
        if s is not None:
            fam = dict(zip(("current", "peak", "allocated", "freed"),
                           (_figure(x, s) for x in specs)))
        out[key] = {"all": fam, "large_pool": dict(fam), "small_pool": dict(zero)}
    out["oversize_allocations"] = dict(zero)  # vram splits blocks of any size
    out["oversize_segments"] = dict(zero)
    out["num_alloc_retries"] = int(s["alloc_retries"]) if s else 0
    out["num_ooms"] = int(s["num_ooms"]) if s else 0
    out["num_sync_all_streams"] = 0
    out["num_device_alloc"] = int(s["backend_calls"]) if s else 0
    out["num_device_free"] = 0
    out["max_split_size"] = -1
    return out


def _device_index(torch, device):
    return torch.cuda._get_device_index(device, optional=True)


def memory_stats(device=None):
    """torch.cuda.memory_stats_as_nested_dict(device) under vram: vram's
    figures for the plug-in's device (every key zero before CUDA is
    initialized, as nothing was allocated)."""
    import torch

    if not torch.cuda.is_initialized():
        return nested_stats(None)
    return nested_stats(_plugin_stats(_device_index(torch, device)))


def _reset_peak(device=None):
    """torch.cuda.reset_peak_memory_stats(device) under vram: the peaks of
    bytes in use, reserved and live blocks start again from now
    (vram_reset_peak)."""
    import torch
    import vram

    lib = vram.library()
    dev = ctypes.c_void_p()
    index = _device_index(torch, device)
    vram._check(lib, lib.vram_torch_device(int(index), ctypes.byref(dev)), "vram_torch_device")
    vram._check(lib, lib.vram_reset_peak(dev), "vram_reset_peak")


def _reset_accumulated(device=None):
    """torch.cuda.reset_accumulated_memory_stats(device) under vram: the
    accumulated figures (bytes and blocks allocated and freed, OOMs,
    retries) count from now."""
    import torch

    index = int(_device_index(torch, device))
    _baseline.pop(index, None)
    s = _plugin_stats(index)
    _baseline[index] = {name: s[name] for name in _ACCUMULATED}


def _no_snapshot(*args, **kwargs):
    raise VramError(
        "vram is PyTorch's allocator here, and PyTorch's memory history cannot "
        "record through it: record the program with `vram record --torch-snapshot "
        "snapshot.pickle -- python3 train.py` (the same pickle, which memory_viz "
        "opens), or set VRAM_TRACE=run.trace.csv and run `vram analyze "
        "--torch-snapshot snapshot.pickle run.trace.csv`")


def install_memory_api(torch=None):
    """Make torch.cuda's memory statistics answer with vram's figures (see
    the table above and docs/PYTHON.md): memory_allocated, max_memory_allocated,
    memory_reserved, max_memory_reserved, memory_stats, memory_summary,
    reset_peak_memory_stats, reset_accumulated_memory_stats; and
    _record_memory_history, _snapshot, _dump_snapshot and memory_snapshot
    say how to get a snapshot from vram. use() calls it. Idempotent."""
    if torch is None:
        import torch
    memory = torch.cuda.memory

    def _cuda_memory_stats(device):
        return nested_stats(_plugin_stats(device))

    def _cuda_reset_peak(device):
        _reset_peak(device)

    def _cuda_reset_accumulated(device):
        _reset_accumulated(device)

    replacements = {
        "memory_stats_as_nested_dict": memory_stats,
        "reset_peak_memory_stats": _reset_peak,
        "reset_accumulated_memory_stats": _reset_accumulated,
        "memory_snapshot": _no_snapshot,
    }
    for name, fn in replacements.items():
        for module in (memory, torch.cuda):
            if hasattr(module, name):
                setattr(module, name, fn)
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
        if hasattr(memory, name):
            setattr(memory, name, _no_snapshot)
    native = getattr(torch, "_C", None)
    for name, fn in (("_cuda_memoryStats", _cuda_memory_stats),
                     ("_cuda_resetPeakMemoryStats", _cuda_reset_peak),
                     ("_cuda_resetAccumulatedMemoryStats", _cuda_reset_accumulated)):
        if native is not None and hasattr(native, name):
            setattr(native, name, fn)


def use(strategy=None, limit=None, library=None, raise_oom=True):
    """Make vram PyTorch's CUDA allocator, with every hook it needs.

    STRATEGY ("expandable", "growth", ...) and LIMIT (a size such as "6G",
    or a fraction such as "50%") set VRAM_STRATEGY and VRAM_MEMORY_LIMIT for
    the plug-in, which reads them once, at its first allocation; None keeps
    the environment's. LIBRARY is libvram.so's path (default: as the vram
    package finds it: VRAM_LIBRARY, the checkout's build, the installed one).

    RAISE_OOM (default): past the cap, PyTorch raises torch.OutOfMemoryError
    with vram's one line in its message (the shim, see the module's text);
    False plugs in vram_torch_malloc, whose NULL PyTorch does not check.

    Must run before PyTorch's first CUDA allocation. Returns the
    CUDAPluggableAllocator. Raises VramError when PyTorch lacks what vram
    needs (a CUDA build with CUDAPluggableAllocator and set_record_stream_fn)
    or the library cannot be found, and PyTorch's own error when its
    allocator is in use already.
    """
    global _current
    import torch

    path = library or _library_path()
    memory = getattr(torch.cuda, "memory", None)
    pluggable = getattr(memory, "CUDAPluggableAllocator", None)
    if pluggable is None:
        raise VramError(
            "this PyTorch (%s) has no torch.cuda.memory.CUDAPluggableAllocator: vram "
            "needs PyTorch 2.0 or later built with CUDA" % torch.__version__
        )
    if strategy is not None:
        os.environ["VRAM_STRATEGY"] = str(strategy)
    if limit is not None:
        os.environ["VRAM_MEMORY_LIMIT"] = str(limit)
    lib = ctypes.CDLL(path)
    alloc_path, alloc_fn, free_fn = path, "vram_torch_malloc", "vram_torch_free"
    probe = pluggable(path, alloc_fn, free_fn).allocator()
    for setter, symbol, required in HOOKS:
        if required and (getattr(probe, setter, None) is None or _address(lib, symbol) is None):
            raise VramError(
                "this PyTorch (%s) has no %s on its allocator object: without it "
                "vram cannot keep memory a side stream still reads (record_stream) "
                "from being reused, and results would be silently wrong; use "
                "PyTorch 2.2 or later" % (torch.__version__, setter)
            )
    if raise_oom:
        try:
            alloc_path = oom_shim(torch, path)
            alloc_fn, free_fn = "vram_torch_malloc_raising", "vram_torch_free_raising"
        except VramError as e:
            warnings.warn(
                "vram: cannot build the shim that makes PyTorch raise OutOfMemoryError "
                "past the cap (%s): past it, PyTorch %s will get a tensor at address 0 "
                "(vram writes its one line on stderr)" % (e, torch.__version__),
                RuntimeWarning,
                stacklevel=2,
            )
    allocator = pluggable(alloc_path, alloc_fn, free_fn)
    allocator._vram_alloc_fn = alloc_fn  # which one PyTorch calls, for reports
    native = allocator.allocator()
    missing_graph = []
    for setter, symbol, required in HOOKS:
        install = getattr(native, setter, None)
        address = _address(lib, symbol)
        if install is None or address is None:
            if required:
                raise VramError(
                    "this PyTorch (%s) has no %s on its allocator object: without it "
                    "vram cannot keep memory a side stream still reads (record_stream) "
                    "from being reused, and results would be silently wrong; use "
                    "PyTorch 2.2 or later" % (torch.__version__, setter)
                )
            if setter in _GRAPH_SETTERS:
                missing_graph.append(setter)
            continue
        install(address)
    if missing_graph:
        warnings.warn(
            "vram: this PyTorch (%s) lacks %s: do not capture CUDA graphs "
            "(torch.cuda.graph, torch.compile mode='reduce-overhead') with vram as the "
            "allocator, their memory would be reused while the graph can still replay"
            % (torch.__version__, ", ".join(missing_graph)),
            RuntimeWarning,
            stacklevel=2,
        )
    memory.change_current_allocator(allocator)
    _current = allocator
    install_memory_api(torch)
    return allocator
