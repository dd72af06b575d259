# SPDX-License-Identifier: MIT
"""A Python program whose GPU allocations come from known lines, for the
call-site test (test_callsites.sh): no torch, the fake driver through
ctypes. leak_step allocates 1 MiB a step and keeps it, with the GIL held
(ctypes.PyDLL keeps it across the call); released allocates through
ctypes.CDLL, which releases the GIL around the call, as PyTorch does
around every operator. direct calls a ctypes function pointer, a C
callable that is not a builtin (as a jitted JAX function is), on a line
of its own: Python's profile function sees no call there (3.12's
sys.monitoring does), so the line before it is all that older Pythons
can name. from_a and from_b reach the same two innermost frames (inner
called by middle) from two lines, as every jnp call reaches JAX's
dispatch: each allocation must name its own line."""
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


def direct(n):
    p = ctypes.c_uint64()
    ref = ctypes.byref(p)
    alloc = RELEASED.cuMemAlloc_v2
    assert alloc(ref, 8192 + n) == 0  # PLANTED direct
    assert RELEASED.cuMemFree_v2(p) == 0


def inner(n):
    p = ctypes.c_uint64()
    assert RELEASED.cuMemAlloc_v2(ctypes.byref(p), n) == 0
    assert RELEASED.cuMemFree_v2(p) == 0


def middle(n):
    inner(n)


def from_a():
    middle(16384)  # PLANTED from_a


def from_b():
    middle(20480)  # PLANTED from_b


def main():
    setup()
    for i in range(30):
        leak_step()
        released()
        direct(i % 2)
        from_a()
        from_b()


main()
