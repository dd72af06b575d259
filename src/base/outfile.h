/* SPDX-License-Identifier: MIT */
/*
** outfile.h -- how every file vram writes is opened: traces (vram record,
** VRAM_TRACE inside every traced process, libvram's), reports (vram
** analyze --html), logs (VRAM_LOG_FILE). The path is often one another
** user can influence: a default name in the current directory, a
** directory everybody may write such as /tmp (root runs these tools too),
** or an environment variable read inside somebody else's program. So a
** file is written only when it is certainly the caller's:
**
**   - created anew (O_CREAT | O_EXCL, which never follows a link), or
**   - already there as a regular file of the caller's effective uid with
**     one link, opened without following a symbolic link (O_NOFOLLOW);
**     it is emptied (or appended to) only after those checks, on the
**     descriptor that was checked, so that nothing swapped in between is
**     touched.
**
** Refused, with the last error "PATH: reason": a symbolic link (even to
** the caller's own file: whoever can change the link chooses the file), a
** file of another user (root too is refused another user's file: a user
** may have made it to have root write over it), a file with other hard
** links (one of its names may be a file the caller must not change), and
** anything that is not a regular file (a FIFO, a device), but the null
** device (/dev/null: output thrown away, as asked). The directories on
** the way are the caller's choice and are followed.
*/
#ifndef VRAM_BASE_OUTFILE_H
#define VRAM_BASE_OUTFILE_H

#include "vram.h"

enum outfile_how {
    OUTFILE_TRUNCATE = 0, /* empty a file that is there */
    OUTFILE_APPEND = 1    /* keep it, and write at its end (O_APPEND) */
};

/*
** Open PATH for writing as above (mode 0644 less the umask when created;
** O_CLOEXEC) into *FD. VRAM_E_IO with the last error "PATH: reason" when
** it cannot or must not be written; *FD is then untouched.
*/
vram_status outfile_open(const char *path, enum outfile_how how, int *fd);

#endif
