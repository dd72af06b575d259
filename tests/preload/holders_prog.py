# SPDX-License-Identifier: MIT
"""holders_prog.py -- a training loop on the fake CUDA driver that keeps one
1 MiB buffer a step, for `vram record`'s holders (tests/cli/test_record_holders.sh).

    python3 holders_prog.py global|local|attr|none [STEPS] [--marks]

Each buffer is one cuMemAlloc_v2 (through the process's global symbols,
where the preload library is), shown to Python as CuPy and Numba show a
device array (__cuda_array_interface__). Each step makes an 8 MiB
activation, dropped, and a 1 MiB buffer kept: in the list `history` of the
module (global), of main() (local), in the list `buf` of a Trainer object
(attr), or nowhere (none). With --marks each step calls vram.mark("step N").
The line numbers of the additions are printed, for the test to compare.
"""
import ctypes
import sys

ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
cu = ctypes.CDLL(None)  # the global scope: the preloaded hook comes first
cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]


class Buffer:
    """Device memory as CuPy and Numba show theirs."""

    def __init__(self, size):
        p = ctypes.c_uint64()
        if cu.cuMemAlloc_v2(ctypes.byref(p), size) != 0:
            raise MemoryError("cuMemAlloc_v2 of %d bytes" % size)
        self.ptr, self.size = p.value, size

    def __del__(self):
        cu.cuMemFree_v2(self.ptr)

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.size,), "typestr": "|u1",
                "version": 3}


class Trainer:
    def __init__(self):
        self.buf = []

    def step(self):
        act = Buffer(8 << 20)
        self.buf.append(Buffer(1 << 20))  # ATTR
        del act


history = []


def step_global():
    act = Buffer(8 << 20)
    history.append(Buffer(1 << 20))  # GLOBAL
    del act


def step_local(kept):
    act = Buffer(8 << 20)
    kept.append(Buffer(1 << 20))  # LOCAL
    del act


def step_none():
    act = Buffer(8 << 20)
    Buffer(1 << 20)
    del act


def main():
    case = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 30
    marks = "--marks" in sys.argv
    if marks:
        import vram
    cu.cuInit(0)
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxPushCurrent_v2(ctx)
    weights = Buffer(32 << 20)
    kept = []
    trainer = Trainer()
    for step in range(steps):
        if marks:
            vram.mark("step %d" % step)
        if case == "global":
            step_global()
        elif case == "local":
            step_local(kept)
        elif case == "attr":
            trainer.step()
        else:
            step_none()
    del weights


if __name__ == "__main__":
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            for tag in ("GLOBAL", "LOCAL", "ATTR"):
                if line.rstrip().endswith("# " + tag) and "tag in" not in line:
                    print("%s %d" % (tag, n))
    main()
