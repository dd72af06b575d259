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

__all__ = ["use", "HOOKS", "oom_shim", "empty_cache"]

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
                os.unlink(tmp)
                raise VramError("compiling %s failed: %s" % (_SHIM_SOURCE, e)) from None
            if run.returncode == 0:
                break
        if run.returncode != 0:
            os.unlink(tmp)
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
    return allocator
