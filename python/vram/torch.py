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
"""

import ctypes
import os
import warnings

from . import VramError, _library_path

__all__ = ["use", "HOOKS"]

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


def use(strategy=None, limit=None, library=None):
    """Make vram PyTorch's CUDA allocator, with every hook it needs.

    STRATEGY ("expandable", "growth", ...) and LIMIT (a size such as "6G",
    or a fraction such as "50%") set VRAM_STRATEGY and VRAM_MEMORY_LIMIT for
    the plug-in, which reads them once, at its first allocation; None keeps
    the environment's. LIBRARY is libvram.so's path (default: as the vram
    package finds it: VRAM_LIBRARY, the checkout's build, the installed one).

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
    allocator = pluggable(path, "vram_torch_malloc", "vram_torch_free")
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
