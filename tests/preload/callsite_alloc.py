# SPDX-License-Identifier: MIT
"""A Python program whose GPU allocations come from known lines, for the
call-site test (test_callsites.sh): no torch, the fake driver through
ctypes. leak_step allocates 1 MiB a step and keeps it, with the GIL held
(ctypes.PyDLL keeps it across the call); released allocates through
ctypes.CDLL, which releases the GIL around the call, as PyTorch does
around every operator."""
import ctypes

HELD = ctypes.PyDLL("libcuda.so.1")
RELEASED = ctypes.CDLL("libcuda.so.1")
kept = []


def setup():
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    assert HELD.cuInit(0) == 0
    assert HELD.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert HELD.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert HELD.cuCtxPushCurrent_v2(ctx) == 0


def leak_step():
    p = ctypes.c_uint64()
    assert HELD.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) == 0  # PLANTED held
    kept.append(p)


def released():
    p = ctypes.c_uint64()
    assert RELEASED.cuMemAlloc_v2(ctypes.byref(p), 4096) == 0  # PLANTED released
    assert RELEASED.cuMemFree_v2(p) == 0


def main():
    setup()
    for _ in range(30):
        leak_step()
        released()


main()
