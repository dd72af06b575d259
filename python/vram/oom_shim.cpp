// oom_shim.cpp -- vram's allocation entry point for PyTorch's
// CUDAPluggableAllocator, raising PyTorch's own out-of-memory error.
//
// PyTorch's CUDAPluggableAllocator (2.0 to 2.11 at least) does not check the
// pointer its allocation function returns: a NULL from vram_torch_malloc
// becomes a tensor whose data_ptr() is 0, and the first kernel that touches
// it kills the CUDA context. Its caching allocator raises
// c10::OutOfMemoryError instead, which PyTorch's Python bindings turn into
// torch.OutOfMemoryError (torch.cuda.OutOfMemoryError). This shim does the
// same from the pluggable allocator's allocation function: the exception
// unwinds through CUDAPluggableAllocator::malloc and allocate(), which hold
// no lock and record nothing before the function returns.
//
// python/vram/torch.py compiles it against the PyTorch in use (its headers
// and libc10, its C++ ABI) and libvram.so, once, into a cache; it needs a
// C++ compiler. Only vram's public C API is used, declared here so that no
// vram header is needed.
#include <sys/types.h>

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" {
typedef struct vram_device vram_device;
int vram_torch_device(int device, vram_device **out);
int vram_alloc(vram_device *dev, size_t size, void *stream, void **out);
void vram_torch_free(void *ptr, ssize_t size, int device, void *stream);
const char *vram_last_error(void);
}

// VRAM_E_OOM in include/vram.h.
static const int kVramOom = 1;

// The allocation function: vram_torch_malloc's contract, but a refusal is
// thrown as PyTorch's error carrying vram's one-line explanation (the cap,
// what is in use and reserved, the setting to try).
extern "C" __attribute__((visibility("default"))) void *
vram_torch_malloc_raising(ssize_t size, int device, void *stream)
{
    vram_device *dev = nullptr;
    void *p = nullptr;
    int st = size < 0 ? -1 : vram_torch_device(device, &dev);
    if (st == 0)
        st = vram_alloc(dev, static_cast<size_t>(size), stream, &p);
    if (st == 0)
        return p;
    std::string why = vram_last_error();
    if (st == kVramOom)
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (vram): ", why);
    TORCH_CHECK(false, "vram could not allocate ", size, " bytes on CUDA device ", device,
                ": ", why);
    return nullptr;
}

extern "C" __attribute__((visibility("default"))) void
vram_torch_free_raising(void *ptr, ssize_t size, int device, void *stream)
{
    vram_torch_free(ptr, size, device, stream);
}

// For the tests, through ctypes (which cannot catch a C++ exception):
// allocate SIZE bytes on DEVICE and give them back. Returns 0 when it
// worked, 1 when c10::OutOfMemoryError was thrown, 2 for another c10::Error;
// the exception's message goes to BUF (LEN bytes, NUL-terminated).
extern "C" __attribute__((visibility("default"))) int
vram_torch_oom_selftest(ssize_t size, int device, char *buf, size_t len)
{
    std::string msg;
    int kind = 0;
    try {
        void *p = vram_torch_malloc_raising(size, device, nullptr);
        vram_torch_free_raising(p, size, device, nullptr);
    } catch (const c10::OutOfMemoryError &e) {
        kind = 1;
        msg = e.msg();
    } catch (const c10::Error &e) {
        kind = 2;
        msg = e.msg();
    }
    if (len > 0) {
        std::strncpy(buf, msg.c_str(), len - 1);
        buf[len - 1] = '\0';
    }
    return kind;
}
