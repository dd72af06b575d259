/* SPDX-License-Identifier: MIT */
/*
** ledger_file.c -- where the group ledgers live and how a file is made,
** checked, mapped or read (docs/LEDGER.md, "The directory" and "The
** file").
**
** Each user's ledgers are files in one directory of that user, mode 0700:
** only the owner can create a name in it, so another user cannot squat a
** group name. /dev/shm itself is writable by everyone, so the directory's
** name, /dev/shm/vram-<uid>, can be taken first by another user; then the
** user's processes use the fallbacks /dev/shm/vram-<uid>.1, .2, ... A
** directory is used only when it is a real directory (never a link),
** owned by the uid in its name and writable by nobody else; of those, the
** lowest is every process's choice, and a new one is made (atomically, by
** mkdir) only when there is none, at the lowest name no one holds. So the
** processes of a user agree on one directory, and no other user can keep
** them from having one.
**
** A file is made unnamed with every block allocated and then linked under
** its name; all zeros but the header is an empty ledger, and every opener
** writes the same header and publishes the magic, so a creator stopped or
** killed halfway leaves nothing for others to wait for. Members map the
** file; readers (the monitors) never do: they read it with pread, so that
** a file its owner truncates, grows or fills with anything cannot harm
** them (a mapping of a truncated file faults with SIGBUS).
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

/* Attempts at finding or making a directory while names keep changing
** (another user racing to take each name just as it is tried). */
#define DIR_ATTEMPTS 16

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

void
ledger_dir_path(char *out, size_t cap, const struct ledger_dir *d)
{
    if (d->seq == 0)
        snprintf(out, cap, LEDGER_ROOT "/vram-%u", (unsigned)d->uid);
    else
        snprintf(out, cap, LEDGER_ROOT "/vram-%u.%u", (unsigned)d->uid, (unsigned)d->seq);
}

/* Decimal digits in [P, END), no leading zero, into *OUT (at most MAX). */
static bool
parse_decimal(const char *p, const char *end, unsigned long max, unsigned long *out)
{
    if (p >= end || (*p == '0' && end - p > 1))
        return false;
    unsigned long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned digit = (unsigned)(*p - '0');
        if (v > (max - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* Whether NAME (an entry of /dev/shm) is a ledger directory's name,
** "vram-<uid>" or "vram-<uid>.<seq>" (seq >= 1, decimal, no leading
** zero); its uid and seq into *D. */
static bool
parse_dir_name(const char *name, struct ledger_dir *d)
{
    if (strncmp(name, "vram-", 5) != 0)
        return false;
    const char *p = name + 5, *dot = strchr(p, '.'), *end = p + strlen(p);
    unsigned long uid = 0, seq = 0;
    if (!parse_decimal(p, dot != NULL ? dot : end, (unsigned long)(uid_t)-1, &uid))
        return false;
    if (dot != NULL && (!parse_decimal(dot + 1, end, UINT32_MAX, &seq) || seq == 0))
        return false;
    d->uid = (uid_t)uid;
    d->seq = (uint32_t)seq;
    return true;
}

/* Whether SB is a directory that user UID's ledgers may live in: a real
** directory (the caller did not follow a link), owned by UID, that nobody
** else may write (only the owner can then create or replace a name in it). */
static bool
dir_valid(const struct stat *sb, uid_t uid)
{
    return S_ISDIR(sb->st_mode) && sb->st_uid == uid && (sb->st_mode & 022) == 0;
}

/* Open directory D if it is valid for D's uid (never through a link);
** -1 otherwise, with errno ENOENT when there is nothing of its name. */
static int
open_valid_dir(const struct ledger_dir *d)
{
    char path[64];
    ledger_dir_path(path, sizeof path, d);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1; /* ENOENT; ELOOP or ENOTDIR: a link or a file of its name */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !dir_valid(&sb, d->uid)) {
        close(fd);
        errno = EEXIST;
        return -1;
    }
    return fd;
}

static int
compare_dirs(const void *a, const void *b)
{
    const struct ledger_dir *x = a, *y = b;
    if (x->uid != y->uid)
        return x->uid < y->uid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
** What /dev/shm holds of ledger directories: every name of the form
** parse_dir_name accepts of user ONLY ((uid_t)-1: any user), in *NAMES
** (*N of them, sorted by uid and seq; malloc'ed, the caller frees it),
** and which of them are valid for their uid (*VALID, the same order).
** VRAM_E_IO when /dev/shm cannot be listed (none: VRAM_OK, nothing).
*/
static vram_status
scan_root(uid_t only, struct ledger_dir **names, bool **valid, int *n)
{
    *names = NULL;
    *valid = NULL;
    *n = 0;
    DIR *dir = opendir(LEDGER_ROOT);
    if (dir == NULL)
        return errno == ENOENT ? VRAM_OK
                               : error_set(VRAM_E_IO, "ledger: cannot list " LEDGER_ROOT ": %s",
                                           strerror(errno));
    struct ledger_dir *d = NULL;
    bool *ok = NULL;
    int count = 0, cap = 0;
    vram_status st = VRAM_OK;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        struct ledger_dir one;
        if (!parse_dir_name(e->d_name, &one) || (only != (uid_t)-1 && one.uid != only))
            continue;
        if (count == cap) {
            int grow = cap == 0 ? 16 : cap * 2;
            struct ledger_dir *d2 = realloc(d, (size_t)grow * sizeof *d2);
            bool *ok2 = d2 != NULL ? realloc(ok, (size_t)grow * sizeof *ok2) : NULL;
            if (d2 != NULL)
                d = d2;
            if (ok2 == NULL) {
                st = error_set(VRAM_E_HOST_MEMORY, "ledger: out of host memory");
                break;
            }
            ok = ok2;
            cap = grow;
        }
        d[count] = one;
        count++;
    }
    if (st == VRAM_OK && count > 1)
        qsort(d, (size_t)count, sizeof *d, compare_dirs);
    for (int i = 0; st == VRAM_OK && i < count; i++) {
        char name[64];
        ledger_dir_path(name, sizeof name, &d[i]);
        struct stat sb;
        ok[i] = fstatat(dirfd(dir), name + sizeof LEDGER_ROOT, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                dir_valid(&sb, d[i].uid);
    }
    closedir(dir);
    if (st != VRAM_OK) {
        free(d);
        free(ok);
        return st;
    }
    *names = d;
    *valid = ok;
    *n = count;
    return VRAM_OK;
}

/* The line naming what holds user UID's directory name SEQ 0, for a
** refusal when no name could be had. */
static void
squatter_text(uid_t uid, char *out, size_t cap)
{
    char path[64];
    struct ledger_dir d = {uid, 0};
    ledger_dir_path(path, sizeof path, &d);
    struct stat sb;
    char who[96];
    if (lstat(path, &sb) != 0) {
        snprintf(out, cap, "%s", path);
        return;
    }
    uid_text(who, sizeof who, sb.st_uid);
    snprintf(out, cap, "%s, %s of %s", path,
             S_ISLNK(sb.st_mode)   ? "a symbolic link"
             : !S_ISDIR(sb.st_mode) ? "a file"
                                    : "a directory",
             who);
}

/*
** Open user UID's ledger directory as all of the user's processes find it
** into *DFD and *D: the lowest valid one (SEQ 0 first, without listing
** /dev/shm, when it is valid); when there is none and CREATE, one made at
** the lowest name nobody holds (mkdir, mode 0700: of racing makers one
** wins, the others find it valid), and then the lowest valid again (a
** lower one may have appeared meanwhile). VRAM_E_NO_DEVICE when there is
** none and not CREATE.
*/
static vram_status
resolve_dir(uid_t uid, bool create, struct ledger_dir *d, int *dfd)
{
    for (int attempt = 0; attempt < DIR_ATTEMPTS; attempt++) {
        struct ledger_dir first = {uid, 0};
        int fd = open_valid_dir(&first);
        if (fd >= 0) {
            *d = first;
            *dfd = fd;
            return VRAM_OK;
        }
        struct ledger_dir *names = NULL;
        bool *valid = NULL;
        int n = 0;
        vram_status st = scan_root(uid, &names, &valid, &n);
        if (st != VRAM_OK)
            return st;
        int lowest = -1;
        for (int i = 0; i < n && lowest < 0; i++)
            if (valid[i])
                lowest = i;
        /* The lowest seq no entry holds: NAMES is sorted by seq. */
        uint32_t absent = 0;
        for (int i = 0; i < n && names[i].seq == absent && absent < UINT32_MAX; i++)
            absent++;
        struct ledger_dir found = lowest >= 0 ? names[lowest] : first;
        free(names);
        free(valid);
        if (lowest >= 0) {
            fd = open_valid_dir(&found);
            if (fd >= 0) {
                *d = found;
                *dfd = fd;
                return VRAM_OK;
            }
            continue; /* changed since it was listed */
        }
        if (!create) {
            char path[64];
            ledger_dir_path(path, sizeof path, &first);
            return error_set(VRAM_E_NO_DEVICE, "no ledger directory of uid %u (%s)",
                             (unsigned)uid, path);
        }
        struct ledger_dir make = {uid, absent};
        char path[64];
        ledger_dir_path(path, sizeof path, &make);
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return error_set(room_status(errno), "ledger directory %s: cannot create it: %s",
                             path, strerror(errno));
    }
    char what[256];
    squatter_text(uid, what, sizeof what);
    return error_set(VRAM_E_IO,
                     "no ledger directory of uid %u could be had: other users keep taking "
                     "each name tried (the first is %s)",
                     (unsigned)uid, what);
}

/* Open directory AT if it is still valid for its uid, else say why. */
static vram_status
open_dir_at(const struct ledger_dir *at, int *dfd)
{
    int fd = open_valid_dir(at);
    if (fd >= 0) {
        *dfd = fd;
        return VRAM_OK;
    }
    char path[64];
    ledger_dir_path(path, sizeof path, at);
    if (errno == ENOENT)
        return error_set(VRAM_E_NO_DEVICE, "no ledger directory %s", path);
    return error_set(VRAM_E_IO, "ledger directory %s is not a directory of uid %u's", path,
                     (unsigned)at->uid);
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
        (head.magic & ~UINT64_C(0xff)) == LEDGER_MAGIC_PREFIX &&
        head.version != LEDGER_VERSION)
        return ledger_file_alien(dir, group, head.magic, head.version);
    return error_set(VRAM_E_IO,
                     "ledger %s/%s has %lld bytes, not the %zu of a ledger of this vram (it "
                     "is not read); remove it once no process of the group runs",
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

/* Give the file behind FD (of SB) its blocks, map it for writing and
** check its header, writing it if it is not there yet. */
static vram_status
map_file(int fd, const char *dir, const char *group, const struct stat *sb,
         struct layout **out)
{
    if (sb->st_size != 0 && (uint64_t)sb->st_size != sizeof(struct layout))
        return wrong_size(fd, dir, group, sb);
    vram_status st = allocate_blocks(fd, dir, group);
    if (st != VRAM_OK)
        return st;
    struct layout *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return error_set(VRAM_E_IO, "ledger %s/%s: mmap: %s", dir, group, strerror(errno));
    uint64_t magic = atomic_load_explicit(&m->magic, memory_order_acquire);
    if (magic == 0) {
        write_header(m, group);
        magic = atomic_load_explicit(&m->magic, memory_order_acquire);
    }
    uint32_t version = atomic_load_explicit(&m->version, memory_order_relaxed);
    if (magic != LEDGER_MAGIC || version != LEDGER_VERSION ||
        atomic_load_explicit(&m->size, memory_order_relaxed) != sizeof(struct layout)) {
        munmap(m, sizeof *m);
        return ledger_file_alien(dir, group, magic, version);
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

static vram_status file_open_once(const struct ledger_dir *at, uid_t uid, const char *group,
                                  bool create, bool writable, struct ledger_file *out,
                                  bool *again);

vram_status
ledger_file_open(const struct ledger_dir *at, uid_t uid, const char *group, bool create,
                 bool writable, struct ledger_file *out)
{
    vram_status st = VRAM_OK;
    bool again = true;
    /* Again: the directory was removed (with its last ledger) between our
    ** finding it and our create. */
    for (int attempt = 0; attempt < 8 && again; attempt++) {
        again = false;
        st = file_open_once(at, uid, group, create, writable, out, &again);
    }
    return st;
}

/*
** A reader's check of the file behind FD (of SB): the layout's size and
** a published header of this version, read with pread (never mapped).
*/
static vram_status
read_head(int fd, const char *dir, const char *group, const struct stat *sb)
{
    /* A creator links its file under its name only once it has its size
    ** (create_file): an empty file is one cut short (or made by hand). */
    if ((uint64_t)sb->st_size != sizeof(struct layout))
        return wrong_size(fd, dir, group, sb);
    struct {
        uint64_t magic;
        uint32_t version, size;
    } head = {0, 0, 0};
    if (pread(fd, &head, sizeof head, 0) != (ssize_t)sizeof head)
        return error_set(VRAM_E_IO, "ledger %s/%s: cannot read it: %s", dir, group,
                         strerror(errno));
    if (head.magic == 0)
        return error_set(VRAM_E_NO_DEVICE, "ledger %s/%s is being created", dir, group);
    if (head.magic != LEDGER_MAGIC || head.version != LEDGER_VERSION ||
        head.size != sizeof(struct layout))
        return ledger_file_alien(dir, group, head.magic, head.version);
    return VRAM_OK;
}

vram_status
ledger_file_alien(const char *dir, const char *group, uint64_t magic, uint32_t version)
{
    if ((magic & ~UINT64_C(0xff)) == LEDGER_MAGIC_PREFIX)
        return error_set(VRAM_E_IO,
                         "ledger %s/%s has version %u, this vram reads only %u (it is not "
                         "read); remove it once no process of the group runs",
                         dir, group, (unsigned)version, LEDGER_VERSION);
    return error_set(VRAM_E_IO,
                     "ledger %s/%s does not start as a vram ledger does (it is not read); "
                     "remove it once no process of the group runs",
                     dir, group);
}

static vram_status
file_open_once(const struct ledger_dir *at, uid_t uid, const char *group, bool create,
               bool writable, struct ledger_file *out, bool *again)
{
    struct ledger_dir where = {uid, 0};
    int dfd = -1;
    vram_status st;
    if (at != NULL) {
        where = *at;
        uid = at->uid;
        st = open_dir_at(at, &dfd);
    } else {
        st = resolve_dir(uid, create, &where, &dfd);
    }
    char dir[64];
    ledger_dir_path(dir, sizeof dir, &where);
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
    struct ledger_file f = {.dir = where, .map = NULL, .fd = -1, .ino = 0};
    st = check_file(fd, dir, group, uid, &sb);
    if (st == VRAM_OK && writable)
        st = map_file(fd, dir, group, &sb, &f.map);
    else if (st == VRAM_OK)
        st = read_head(fd, dir, group, &sb);
    if (st != VRAM_OK || writable) {
        close(fd); /* a writer's mapping stays */
    } else {
        f.fd = fd;
    }
    if (st == VRAM_OK) {
        f.ino = (uint64_t)sb.st_ino;
        *out = f;
    }
    return st;
}

void
ledger_file_unlink(const struct ledger_dir *d, const char *group, uint64_t ino)
{
    char path[64];
    ledger_dir_path(path, sizeof path, d);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    struct stat sb;
    /* Only the file we mapped: a group created anew under the name since
    ** is another file and stays. The directory is one of D's uid: nothing
    ** another user made is ever removed (fstat below). */
    if (fstat(dfd, &sb) == 0 && dir_valid(&sb, d->uid) &&
        fstatat(dfd, group, &sb, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t)sb.st_ino == ino)
        unlinkat(dfd, group, 0);
    close(dfd);
    /* The directory goes with its last ledger (rmdir fails while it holds
    ** one); an opener that finds it gone meanwhile makes it anew. rmdir
    ** never follows a link, and in the sticky /dev/shm only its owner (or
    ** root) can remove or replace the name: it is still D's. */
    rmdir(path);
}

bool
ledger_file_same(const struct ledger_dir *d, const char *group, uint64_t ino)
{
    char path[64 + LEDGER_GROUP_LEN];
    ledger_dir_path(path, 64, d);
    size_t at = strlen(path);
    snprintf(path + at, sizeof path - at, "/%s", group);
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == d->uid &&
           (uint64_t)sb.st_ino == ino && (uint64_t)sb.st_size == sizeof(struct layout);
}

struct layout *
ledger_file_map_quiet(const struct ledger_dir *d, const char *group, uint64_t ino)
{
    char path[64];
    ledger_dir_path(path, sizeof path, d);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return NULL;
    struct stat sb;
    int fd = -1;
    if (fstat(dfd, &sb) == 0 && dir_valid(&sb, d->uid))
        fd = openat(dfd, group, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0)
        return NULL;
    struct layout *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == d->uid &&
        (sb.st_mode & 07777) == 0600 && (uint64_t)sb.st_ino == ino &&
        (uint64_t)sb.st_size == sizeof(struct layout))
        m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    if (atomic_load(&m->magic) != LEDGER_MAGIC || atomic_load(&m->version) != LEDGER_VERSION ||
        atomic_load(&m->size) != sizeof(struct layout)) {
        munmap(m, sizeof *m);
        return NULL;
    }
    return m;
}

static int
compare_groups(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* The groups in directory DFD (already open, of user UID): regular files
** of UID with a group's name, sorted. Takes DFD. */
static vram_status
list_groups_in(int dfd, uid_t uid, char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
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
ledger_list_in(const struct ledger_dir *d, char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
    if (d == NULL || n == NULL || max < 0 || (max > 0 && groups == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list: bad argument");
    *n = 0;
    int dfd = -1;
    vram_status st = open_dir_at(d, &dfd);
    if (st == VRAM_E_NO_DEVICE)
        return VRAM_OK; /* gone meanwhile: no ledger */
    if (st != VRAM_OK)
        return st;
    return list_groups_in(dfd, d->uid, groups, max, n);
}

vram_status
ledger_list(char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
    if (n == NULL || max < 0 || (max > 0 && groups == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list: bad argument");
    *n = 0;
    struct ledger_dir d;
    int dfd = -1;
    vram_status st = resolve_dir(geteuid(), false, &d, &dfd);
    if (st == VRAM_E_NO_DEVICE)
        return VRAM_OK; /* no ledger yet */
    if (st != VRAM_OK)
        return st;
    return list_groups_in(dfd, d.uid, groups, max, n);
}

vram_status
ledger_list_dirs(uid_t only, struct ledger_dir *dirs, int max, int *n)
{
    if (n == NULL || max < 0 || (max > 0 && dirs == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list_dirs: bad argument");
    *n = 0;
    struct ledger_dir *names = NULL;
    bool *valid = NULL;
    int count = 0;
    vram_status st = scan_root(only, &names, &valid, &count);
    if (st != VRAM_OK)
        return st;
    int k = 0;
    for (int i = 0; i < count && k < max; i++)
        if (valid[i])
            dirs[k++] = names[i];
    free(names);
    free(valid);
    *n = k;
    return VRAM_OK;
}

/* How long a directory must have been still before a stamp of it can be
** trusted: many jiffies (1-10 ms), and the coarse clock of file times
** against CLOCK_REALTIME. */
#define LEDGER_STILL_NS INT64_C(100000000)

bool
ledger_dir_stamp(const struct ledger_dir *d, struct ledger_stamp *out)
{
    char path[64];
    if (d == NULL)
        snprintf(path, sizeof path, "%s", LEDGER_ROOT);
    else
        ledger_dir_path(path, sizeof path, d);
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

