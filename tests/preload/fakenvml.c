/* SPDX-License-Identifier: MIT */
/*
** fakenvml.c -- a fake NVML, built as libnvidia-ml.so.1, for the preload
** tests: the two devices of the fake CUDA driver (same UUIDs, physical
** order, as NVML numbers them), each reporting 1 GiB total, 4 MiB
** reserved by the "driver" and nothing used -- so that what a test reads
** through libvram-preload.so shows what the interposer changed.
**
** Only what the tests call: nvmlInit_v2, nvmlShutdown,
** nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName
** ("NVIDIA Fake GPU <index>"),
** nvmlDeviceGetHandleByUUID, nvmlDeviceGetUUID, nvmlDeviceGetMemoryInfo,
** nvmlDeviceGetMemoryInfo_v2 and nvmlDeviceGetComputeRunningProcesses_v3
** (nvml.h's layouts). The processes are the calling process alone, with
** what the fake CUDA driver loaded in it says it holds on the device
** (fakecuda_process_used: its context and everything it holds), when it
** holds a context or memory there (fakecuda_process_listed), as NVML
** lists a process with a CUDA context. Every call returns 0 (NVML_SUCCESS) or 2
** (NVML_ERROR_INVALID_ARGUMENT).
*/
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))
#define NVML_OK 0
#define NVML_INVALID 2
#define N_DEVICES 2
#define TOTAL (1ULL << 30)
#define RESERVED (4ULL << 20)

struct nvml_memory {
    unsigned long long total, free, used;
};

struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

struct fake_device {
    int index;
};

static struct fake_device devices[N_DEVICES] = {{0}, {1}};

FAKE_API int nvmlInit_v2(void);
FAKE_API int nvmlShutdown(void);
FAKE_API int nvmlDeviceGetCount_v2(unsigned *count);
FAKE_API int nvmlDeviceGetHandleByIndex_v2(unsigned index, struct fake_device **device);
FAKE_API int nvmlDeviceGetUUID(struct fake_device *device, char *uuid, unsigned length);
FAKE_API int nvmlDeviceGetName(struct fake_device *device, char *name, unsigned length);
FAKE_API int nvmlDeviceGetMemoryInfo(struct fake_device *device, struct nvml_memory *m);
FAKE_API int nvmlDeviceGetHandleByUUID(const char *uuid, struct fake_device **device);
struct nvml_process {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};
FAKE_API int nvmlDeviceGetComputeRunningProcesses_v3(struct fake_device *device,
                                                     unsigned *count,
                                                     struct nvml_process *infos);
FAKE_API int nvmlDeviceGetMemoryInfo_v2(struct fake_device *device,
                                        struct nvml_memory_v2 *m);

static int
valid(const struct fake_device *d)
{
    return d == &devices[0] || d == &devices[1];
}

int
nvmlInit_v2(void)
{
    return NVML_OK;
}

int
nvmlShutdown(void)
{
    return NVML_OK;
}

int
nvmlDeviceGetCount_v2(unsigned *count)
{
    if (count == NULL)
        return NVML_INVALID;
    *count = N_DEVICES;
    return NVML_OK;
}

int
nvmlDeviceGetHandleByIndex_v2(unsigned index, struct fake_device **device)
{
    if (device == NULL || index >= N_DEVICES)
        return NVML_INVALID;
    *device = &devices[index];
    return NVML_OK;
}

int
nvmlDeviceGetUUID(struct fake_device *device, char *uuid, unsigned length)
{
    if (!valid(device) || uuid == NULL || length < 41)
        return NVML_INVALID;
    snprintf(uuid, length, "GPU-facecda0-0001-4000-8000-0000000000%02x",
             (unsigned)device->index);
    return NVML_OK;
}

int
nvmlDeviceGetName(struct fake_device *device, char *name, unsigned length)
{
    if (!valid(device) || name == NULL || length == 0)
        return NVML_INVALID;
    snprintf(name, length, "NVIDIA Fake GPU %d", device->index);
    return NVML_OK;
}

int
nvmlDeviceGetMemoryInfo(struct fake_device *device, struct nvml_memory *m)
{
    if (!valid(device) || m == NULL)
        return NVML_INVALID;
    m->total = TOTAL;
    m->used = RESERVED; /* v1: reserved and allocated together */
    m->free = TOTAL - RESERVED;
    return NVML_OK;
}

int
nvmlDeviceGetMemoryInfo_v2(struct fake_device *device, struct nvml_memory_v2 *m)
{
    if (!valid(device) || m == NULL || m->version != ((unsigned)sizeof *m | 2u << 24))
        return NVML_INVALID;
    m->total = TOTAL;
    m->reserved = RESERVED;
    m->used = 0;
    m->free = TOTAL - RESERVED;
    return NVML_OK;
}

int
nvmlDeviceGetHandleByUUID(const char *uuid, struct fake_device **device)
{
    char mine[64];
    for (int i = 0; uuid != NULL && device != NULL && i < N_DEVICES; i++) {
        nvmlDeviceGetUUID(&devices[i], mine, sizeof mine);
        if (strcmp(mine, uuid) == 0) {
            *device = &devices[i];
            return NVML_OK;
        }
    }
    return NVML_INVALID;
}

/* NVML_ERROR_INSUFFICIENT_SIZE: *count then says how many there are. */
#define NVML_INSUFFICIENT_SIZE 7

int
nvmlDeviceGetComputeRunningProcesses_v3(struct fake_device *device, unsigned *count,
                                        struct nvml_process *infos)
{
    if (!valid(device) || count == NULL)
        return NVML_INVALID;
    typedef unsigned long long (*used_fn)(unsigned int);
    typedef int (*listed_fn)(unsigned int);
    void *p = dlsym(RTLD_DEFAULT, "fakecuda_process_used");
    void *q = dlsym(RTLD_DEFAULT, "fakecuda_process_listed");
    void *cuda = p == NULL ? dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (cuda != NULL) {
        p = dlsym(cuda, "fakecuda_process_used");
        q = dlsym(cuda, "fakecuda_process_listed");
        dlclose(cuda); /* only drops the reference NOLOAD took */
    }
    used_fn used_of;
    listed_fn listed_of;
    memcpy(&used_of, &p, sizeof p);
    memcpy(&listed_of, &q, sizeof q);
    unsigned long long used = p != NULL ? used_of((unsigned)device->index) : 0;
    unsigned n = q != NULL ? (listed_of((unsigned)device->index) ? 1 : 0) : used > 0 ? 1 : 0;
    if (*count < n) {
        *count = n;
        return NVML_INSUFFICIENT_SIZE;
    }
    *count = n;
    if (n == 1 && infos != NULL) {
        infos[0].pid = (unsigned)getpid();
        infos[0].used = used;
        infos[0].gpu_instance = 0xffffffffu;
        infos[0].compute_instance = 0xffffffffu;
    }
    return NVML_OK;
}
