/* SPDX-License-Identifier: MIT */
/*
** ledger_file.c -- where the group ledgers live and how a file is made,
** checked and mapped (docs/LEDGER.md, "The directory" and "The file").
**
** Each user's ledgers are files in one directory, /dev/shm/vram-<uid>,
** mode 0700, owned by that user: only the owner can create a name in it,
** so another user cannot squat a group name. /dev/shm itself is writable
** by everyone, so the directory's name can be squatted; it is therefore
** opened with O_NOFOLLOW and checked with fstat (a directory, owned by the
** uid in its name, writable by nobody else) before anything in it is
** used, and a squatter's file is named in the error.
**
** A fresh file is all zeros, which is an empty ledger but for the header;
** every opener writes the same header and publishes the magic, so a
** creator stopped or killed halfway leaves nothing for others to wait for.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "ledger/ledger_internal.h"

#define LEDGER_ROOT "/dev/shm"

bool
ledger_group_valid(const char *group)
{
    size_t n = 0;
    for (; group[n] != '\0'; n++) {
        char c = group[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok || n + 1 >= LEDGER_GROUP_LEN)
            return false;
    }
    /* "." and ".." name directories. */
    return n > 0 && strcmp(group, ".") != 0 && strcmp(group, "..") != 0;
}

void
ledger_dir_path(char *out, size_t cap, uid_t uid)
{
    snprintf(out, cap, LEDGER_ROOT "/vram-%u", (unsigned)uid);
}

/* The status of a failure with ERRNO value ERR: no room in /dev/shm (it
** is memory) is VRAM_E_HOST_MEMORY, anything else VRAM_E_IO. */
static vram_status
room_status(int err)
{
    return err == ENOSPC || err == ENOMEM || err == EDQUOT ? VRAM_E_HOST_MEMORY : VRAM_E_IO;
}

/* "uid N (name)" of UID into OUT. getpwuid_r only: no static buffer. */
static void
uid_text(char *out, size_t cap, uid_t uid)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res != NULL)
        snprintf(out, cap, "uid %u (%s)", (unsigned)uid, res->pw_name);
    else
        snprintf(out, cap, "uid %u", (unsigned)uid);
}

/*
** Open UID's ledger directory (creating it, mode 0700, if CREATE and it is
** missing) into *DFD. Never follows a symbolic link; refuses a directory
** owned by another user or writable by others, naming it.
*/
static vram_status
open_dir(uid_t uid, bool create, int *dfd)
{
    char path[64];
    ledger_dir_path(path, sizeof path, uid);
    if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
        return error_set(room_status(errno), "ledger directory %s: cannot create it: %s",
                         path, strerror(errno));
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        struct stat sb;
        char who[96];
        if (err == ENOENT)
            return error_set(VRAM_E_NO_DEVICE, "no ledger directory %s", path);
        if (lstat(path, &sb) == 0 && (S_ISLNK(sb.st_mode) || !S_ISDIR(sb.st_mode))) {
            uid_text(who, sizeof who, sb.st_uid);
            return error_set(VRAM_E_IO,
                             "ledger directory %s is %s of %s, not a directory: it is never "
                             "followed (whoever made it squats vram's name; remove it)",
                             path, S_ISLNK(sb.st_mode) ? "a symbolic link" : "a file", who);
        }
        return error_set(VRAM_E_IO, "ledger directory %s: %s", path, strerror(err));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return error_set(VRAM_E_IO, "ledger directory %s: %s", path, strerror(err));
    }
    if (sb.st_uid != uid) {
        char who[96];
        uid_text(who, sizeof who, sb.st_uid);
        close(fd);
        return error_set(VRAM_E_IO,
                         "ledger directory %s belongs to %s, not uid %u: another user made "
                         "it to squat the name; it is never used (it must be removed)",
                         path, who, (unsigned)uid);
    }
    if ((sb.st_mode & 022) != 0) {
        close(fd);
        return error_set(VRAM_E_IO,
                         "ledger directory %s has mode %04o: others could create or replace "
                         "ledgers in it, so it is not used (chmod 700 it)",
                         path, (unsigned)(sb.st_mode & 07777));
    }
    *dfd = fd;
    return VRAM_OK;
}

/* The file behind FD must be a regular file of UID, mode 0600. */
static vram_status
check_file(int fd, const char *dir, const char *group, uid_t uid, struct stat *sb)
{
    if (fstat(fd, sb) != 0)
        return error_set(VRAM_E_IO, "ledger %s/%s: %s", dir, group, strerror(errno));
    if (!S_ISREG(sb->st_mode))
        return error_set(VRAM_E_IO, "ledger %s/%s is not a regular file", dir, group);
    if (sb->st_uid != uid) {
        char who[96];
        uid_text(who, sizeof who, sb->st_uid);
        return error_set(VRAM_E_IO,
                         "ledger %s/%s belongs to %s, not uid %u: another user's ledger is "
                         "never used",
                         dir, group, who, (unsigned)uid);
    }
    if ((sb->st_mode & 07777) != 0600)
        return error_set(VRAM_E_IO,
                         "ledger %s/%s has mode %04o, not 0600: others could read or change "
                         "it, so it is not used",
                         dir, group, (unsigned)(sb->st_mode & 07777));
    return VRAM_OK;
}

/* Write the header (the same bytes whoever writes it) and publish it. */
static void
write_header(struct layout *m, const char *group)
{
    atomic_store_explicit(&m->version, LEDGER_VERSION, memory_order_relaxed);
    atomic_store_explicit(&m->size, (uint32_t)sizeof(struct layout), memory_order_relaxed);
    for (size_t i = 0; i < LEDGER_GROUP_LEN; i++) {
        char c = i < strlen(group) ? group[i] : '\0';
        atomic_store_explicit(&m->group[i], c, memory_order_relaxed);
    }
    ledger_fault(LEDGER_FAULT_HEADER);
    uint64_t zero = 0;
    atomic_compare_exchange_strong_explicit(&m->magic, &zero, LEDGER_MAGIC,
                                            memory_order_release, memory_order_relaxed);
}

/*
** The line for a file of another size than this build's layout: the
** version in its header when the header is one of vram's (every version
** keeps magic, version and size first), else its size. Nothing of it is
** mapped or read beyond those 16 bytes.
*/
static vram_status
wrong_size(int fd, const char *dir, const char *group, const struct stat *sb)
{
    struct {
        uint64_t magic;
        uint32_t version, size;
    } head = {0, 0, 0};
    if (pread(fd, &head, sizeof head, 0) == (ssize_t)sizeof head &&
        (head.magic & ~UINT64_C(0xff)) == LEDGER_MAGIC_PREFIX)
        return error_set(VRAM_E_IO,
                         "ledger %s/%s has version %u, this vram reads only %u (it is not "
                         "read); remove it once no process of the group runs",
                         dir, group, (unsigned)head.version, LEDGER_VERSION);
    return error_set(VRAM_E_IO,
                     "ledger %s/%s has %lld bytes, this vram expects %zu (another vram "
                     "version?); remove it once no process of the group runs",
                     dir, group, (long long)sb->st_size, sizeof(struct layout));
}

/*
** Give the file behind FD its full size with every block allocated, before
** anything is written through a mapping: a store to a page that /dev/shm
** has no room for kills the writer with SIGBUS (a sparse file, as
** ftruncate makes, takes its pages only when they are first written).
** Every writer does it, not only the creator, so that a creator killed
** before it has is made good by the next one; blocks already there cost
** nothing. A full /dev/shm (or its quota) is VRAM_E_HOST_MEMORY: it is
** host memory that is lacking.
*/
static vram_status
allocate_blocks(int fd, const char *dir, const char *group)
{
    int err;
    int tries = 0;
    do
        err = posix_fallocate(fd, 0, (off_t)sizeof(struct layout));
    while (err == EINTR && ++tries < 16);
    if (err == 0)
        return VRAM_OK;
    return error_set(room_status(err), "ledger %s/%s: cannot allocate its %zu bytes: %s",
                     dir, group, sizeof(struct layout), strerror(err));
}

/* Map the file behind FD and check (or, if WRITABLE, write) its header. */
static vram_status
map_file(int fd, const char *dir, const char *group, const struct stat *sb, bool writable,
         struct layout **out)
{
    if (sb->st_size == 0 && !writable)
        return error_set(VRAM_E_NO_DEVICE, "ledger %s/%s is being created", dir, group);
    if (sb->st_size != 0 && (uint64_t)sb->st_size != sizeof(struct layout))
        return wrong_size(fd, dir, group, sb);
    vram_status st = writable ? allocate_blocks(fd, dir, group) : VRAM_OK;
    if (st != VRAM_OK)
        return st;
    struct layout *m = mmap(NULL, sizeof *m, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                            MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return error_set(VRAM_E_IO, "ledger %s/%s: mmap: %s", dir, group, strerror(errno));
    uint64_t magic = atomic_load_explicit(&m->magic, memory_order_acquire);
    if (magic == 0 && writable) {
        write_header(m, group);
        magic = atomic_load_explicit(&m->magic, memory_order_acquire);
    }
    if (magic == 0) {
        munmap(m, sizeof *m);
        return error_set(VRAM_E_NO_DEVICE, "ledger %s/%s is being created", dir, group);
    }
    uint32_t version = atomic_load_explicit(&m->version, memory_order_relaxed);
    if (magic != LEDGER_MAGIC || version != LEDGER_VERSION ||
        atomic_load_explicit(&m->size, memory_order_relaxed) != sizeof(struct layout)) {
        munmap(m, sizeof *m);
        return error_set(VRAM_E_IO,
                         "ledger %s/%s has version %u, this vram writes %u; remove it once no "
                         "process of the group runs",
                         dir, group, (unsigned)version, LEDGER_VERSION);
    }
    *out = m;
    return VRAM_OK;
}

/*
** Make GROUP's file in the directory DFD: an unnamed file (O_TMPFILE),
** mode 0600, of the layout's size with every block allocated, then linked
** under its name. So a ledger's name never names a file whose blocks are
** not all there, and a creator that fails (a full /dev/shm) or is killed
** leaves nothing behind. *FD: the file, open for reading and writing; -1
** when the name was taken meanwhile (another creator's: the caller opens
** it). Where O_TMPFILE is not supported, the file is created under its
** name and then given its blocks (a failure leaves it empty, which the
** next opener completes). *AGAIN: the directory went away meanwhile.
*/
static vram_status
create_file(int dfd, const char *dir, const char *group, int *fd, bool *again)
{
    bool named = false;
    int f = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (f < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        named = true;
        f = openat(dfd, group, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (f < 0 && errno == EEXIST)
            return VRAM_OK;
    }
    if (f < 0) {
        int err = errno;
        *again = err == ENOENT;
        return error_set(room_status(err), "ledger %s/%s: cannot create it: %s", dir, group,
                         strerror(err));
    }
    vram_status st = VRAM_OK;
    if (fchmod(f, 0600) != 0) /* whatever the umask */
        st = error_set(VRAM_E_IO, "ledger %s/%s: chmod: %s", dir, group, strerror(errno));
    if (st == VRAM_OK)
        st = allocate_blocks(f, dir, group);
    if (st == VRAM_OK && !named) {
        char self[40];
        snprintf(self, sizeof self, "/proc/self/fd/%d", f);
        if (linkat(AT_FDCWD, self, dfd, group, AT_SYMLINK_FOLLOW) != 0) {
            int err = errno;
            close(f);
            if (err == EEXIST)
                return VRAM_OK; /* another creator's */
            *again = err == ENOENT;
            return error_set(room_status(err), "ledger %s/%s: cannot create it: %s", dir,
                             group, strerror(err));
        }
    }
    if (st != VRAM_OK) {
        close(f);
        return st;
    }
    *fd = f;
    return VRAM_OK;
}

static vram_status file_open_once(uid_t uid, const char *group, bool create, bool writable,
                                  struct layout **out, uint64_t *ino, bool *again);

vram_status
ledger_file_open(uid_t uid, const char *group, bool create, bool writable,
                 struct layout **out, uint64_t *ino)
{
    vram_status st = VRAM_OK;
    bool again = true;
    /* Again: the directory was removed (with its last ledger) between our
    ** mkdir and our create. */
    for (int attempt = 0; attempt < 8 && again; attempt++) {
        again = false;
        st = file_open_once(uid, group, create, writable, out, ino, &again);
    }
    return st;
}

static vram_status
file_open_once(uid_t uid, const char *group, bool create, bool writable,
               struct layout **out, uint64_t *ino, bool *again)
{
    char dir[64];
    ledger_dir_path(dir, sizeof dir, uid);
    int dfd = -1;
    vram_status st = open_dir(uid, create, &dfd);
    if (st == VRAM_E_NO_DEVICE)
        return error_set(VRAM_E_NO_DEVICE, "no ledger for group %s (%s/%s)", group, dir,
                         group);
    if (st != VRAM_OK)
        return st;
    /* O_NONBLOCK: a FIFO put in the file's place must not block the open. */
    int mode = (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = openat(dfd, group, mode);
    if (fd < 0 && errno == ENOENT && create) {
        st = create_file(dfd, dir, group, &fd, again);
        if (st != VRAM_OK) {
            close(dfd);
            return st;
        }
        if (fd < 0) /* another creator's, made meanwhile */
            fd = openat(dfd, group, mode);
    }
    if (fd < 0) {
        int err = errno;
        close(dfd);
        if (err == ENOENT)
            return error_set(create ? VRAM_E_IO : VRAM_E_NO_DEVICE,
                             "no ledger for group %s (%s/%s)", group, dir, group);
        if (err == ELOOP)
            return error_set(VRAM_E_IO, "ledger %s/%s is a symbolic link: never followed",
                             dir, group);
        return error_set(VRAM_E_IO, "ledger %s/%s: %s", dir, group, strerror(err));
    }
    close(dfd);
    struct stat sb;
    st = check_file(fd, dir, group, uid, &sb);
    if (st == VRAM_OK)
        st = map_file(fd, dir, group, &sb, writable, out);
    if (st == VRAM_OK && ino != NULL)
        *ino = (uint64_t)sb.st_ino;
    close(fd); /* the mapping stays */
    return st;
}

void
ledger_file_unlink(const char *group, uint64_t ino)
{
    int dfd = -1;
    if (open_dir(geteuid(), false, &dfd) != VRAM_OK)
        return;
    struct stat sb;
    /* Only the file we mapped: a group created anew under the name since
    ** is another file and stays. */
    if (fstatat(dfd, group, &sb, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t)sb.st_ino == ino)
        unlinkat(dfd, group, 0);
    close(dfd);
    /* The directory goes with its last ledger (rmdir fails while it holds
    ** one); an opener that finds it gone meanwhile makes it anew. */
    char dir[64];
    ledger_dir_path(dir, sizeof dir, geteuid());
    rmdir(dir);
}

bool
ledger_file_same(uid_t uid, const char *group, uint64_t ino)
{
    char path[64 + LEDGER_GROUP_LEN];
    ledger_dir_path(path, 64, uid);
    size_t at = strlen(path);
    snprintf(path + at, sizeof path - at, "/%s", group);
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == uid &&
           (uint64_t)sb.st_ino == ino && (uint64_t)sb.st_size == sizeof(struct layout);
}

static int
compare_groups(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

vram_status
ledger_list_user(uid_t uid, char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
    if (n == NULL || max < 0 || (max > 0 && groups == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list: bad argument");
    *n = 0;
    int dfd = -1;
    vram_status st = open_dir(uid, false, &dfd);
    if (st == VRAM_E_NO_DEVICE)
        return VRAM_OK; /* no ledger yet */
    if (st != VRAM_OK)
        return st;
    DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        int err = errno;
        close(dfd);
        return error_set(VRAM_E_IO, "ledger directory: %s", strerror(err));
    }
    int count = 0;
    struct dirent *e;
    while (count < max && (e = readdir(dir)) != NULL) {
        if (!ledger_group_valid(e->d_name))
            continue;
        struct stat sb;
        if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode) || sb.st_uid != uid)
            continue;
        memcpy(groups[count], e->d_name, strlen(e->d_name) + 1);
        count++;
    }
    closedir(dir);
    if (count > 1)
        qsort(groups, (size_t)count, sizeof groups[0], compare_groups);
    *n = count;
    return VRAM_OK;
}

vram_status
ledger_list(char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
    return ledger_list_user(geteuid(), groups, max, n);
}

/* How long a directory must have been still before a stamp of it can be
** trusted: many jiffies (1-10 ms), and the coarse clock of file times
** against CLOCK_REALTIME. */
#define LEDGER_STILL_NS INT64_C(100000000)

bool
ledger_dir_stamp(bool root, uid_t uid, struct ledger_stamp *out)
{
    char path[64];
    if (root)
        snprintf(path, sizeof path, "%s", LEDGER_ROOT);
    else
        ledger_dir_path(path, sizeof path, uid);
    struct timespec now;
    struct stat sb;
    clock_gettime(CLOCK_REALTIME, &now);
    if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return false;
    *out = (struct ledger_stamp){
        .ino = (uint64_t)sb.st_ino,
        .size = (uint64_t)sb.st_size,
        .mode = (uint64_t)sb.st_mode,
        .uid = (uint64_t)sb.st_uid,
        .mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec,
        .ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec,
        .taken_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec,
    };
    return true;
}

bool
ledger_stamp_still(const struct ledger_stamp *then, const struct ledger_stamp *now)
{
    int64_t last = then->mtime_ns > then->ctime_ns ? then->mtime_ns : then->ctime_ns;
    return then->ino == now->ino && then->size == now->size && then->mode == now->mode &&
           then->uid == now->uid && then->mtime_ns == now->mtime_ns &&
           then->ctime_ns == now->ctime_ns && then->taken_ns - last >= LEDGER_STILL_NS;
}

vram_status
ledger_list_users(uid_t *uids, int max, int *n)
{
    if (n == NULL || max < 0 || (max > 0 && uids == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list_users: bad argument");
    *n = 0;
    DIR *dir = opendir(LEDGER_ROOT);
    if (dir == NULL)
        return errno == ENOENT ? VRAM_OK
                               : error_set(VRAM_E_IO, "ledger: cannot list " LEDGER_ROOT ": %s",
                                           strerror(errno));
    int count = 0;
    struct dirent *e;
    while (count < max && (e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, "vram-", 5) != 0)
            continue;
        const char *p = e->d_name + 5;
        char *end = NULL;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0'))
            continue;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno != 0 || *end != '\0' || v > (unsigned long)(uid_t)-1)
            continue;
        /* Only a real directory owned by the uid in its name counts. */
        struct stat sb;
        if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(sb.st_mode) || sb.st_uid != (uid_t)v || (sb.st_mode & 022) != 0)
            continue;
        uids[count++] = (uid_t)v;
    }
    closedir(dir);
    *n = count;
    return VRAM_OK;
}
