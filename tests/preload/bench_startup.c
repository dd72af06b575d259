/* SPDX-License-Identifier: MIT */
/*
** bench_startup.c -- what libvram-preload.so costs a program that never
** touches CUDA: the wall time from posix_spawn to waitpid of PROGRAM
** (default /bin/true), bare, with the library preloaded, and with another
** small library preloaded (what any preload costs the dynamic loader),
** interleaved run by run so that the machine's drift hits every arm alike.
** `make bench` runs it; the figure is in BENCHMARKS.md.
**
** LD_PRELOAD stands in for /etc/ld.so.preload: the loader maps and
** relocates the library the same way from either.
**
** Usage: bench_startup LIBVRAM_PRELOAD.so OTHER_LIB.so [RUNS [PROGRAM]]
** Prints per arm the median, the 10th and 90th percentiles and the mean,
** in microseconds, and the difference of the medians.
** Test code: exit is allowed here.
*/
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

enum { ARMS = 3 };

static double
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One run of PROGRAM with ENVP: wall time, microseconds; *CPU gets the
** child's user + system CPU time (less disturbed by other load). */
static double
run_once(const char *program, char **envp, double *cpu)
{
    char *argv[] = {(char *)program, NULL};
    double t0 = now_us();
    pid_t pid;
    if (posix_spawn(&pid, program, NULL, NULL, argv, envp) != 0) {
        perror("bench_startup: posix_spawn");
        exit(1);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_startup: %s failed\n", program);
        exit(1);
    }
    double wall = now_us() - t0;
    *cpu = (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec * 1e6 + (double)ru.ru_stime.tv_usec;
    return wall;
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_startup LIBVRAM_PRELOAD.so OTHER_LIB.so [RUNS [PROGRAM]]\n");
        return 2;
    }
    int runs = argc > 3 ? atoi(argv[3]) : 2000;
    const char *program = argc > 4 ? argv[4] : "/bin/true";
    if (runs < 10) {
        fprintf(stderr, "bench_startup: at least 10 runs\n");
        return 2;
    }
    static char vram_env[4200], other_env[4200];
    snprintf(vram_env, sizeof vram_env, "LD_PRELOAD=%s", argv[1]);
    snprintf(other_env, sizeof other_env, "LD_PRELOAD=%s", argv[2]);
    char *envs[ARMS][3] = {
        {"PATH=/usr/bin:/bin", NULL, NULL},
        {"PATH=/usr/bin:/bin", vram_env, NULL},
        {"PATH=/usr/bin:/bin", other_env, NULL},
    };
    const char *names[ARMS] = {"bare", "libvram-preload.so", "other library"};
    double *t[ARMS], *c[ARMS], cpu;
    for (int a = 0; a < ARMS; a++) {
        t[a] = malloc((size_t)runs * sizeof(double));
        c[a] = malloc((size_t)runs * sizeof(double));
        if (t[a] == NULL || c[a] == NULL)
            return 1;
    }
    /* Warm the page cache and the loader's caches first. */
    for (int i = 0; i < 20; i++)
        for (int a = 0; a < ARMS; a++)
            run_once(program, envs[a], &cpu);
    for (int i = 0; i < runs; i++)
        for (int k = 0; k < ARMS; k++) {
            int a = (i + k) % ARMS; /* rotate the order, so no arm always goes first */
            t[a][i] = run_once(program, envs[a], &c[a][i]);
        }
    double median[ARMS], cpu_median[ARMS];
    printf("bench_startup: %s, %d runs per arm, interleaved\n", program, runs);
    for (int a = 0; a < ARMS; a++) {
        double sum = 0, csum = 0;
        for (int i = 0; i < runs; i++) {
            sum += t[a][i];
            csum += c[a][i];
        }
        qsort(t[a], (size_t)runs, sizeof(double), cmp_double);
        qsort(c[a], (size_t)runs, sizeof(double), cmp_double);
        median[a] = t[a][runs / 2];
        cpu_median[a] = c[a][runs / 2];
        printf("  %-20s wall median %7.1f us  p10 %7.1f  p90 %7.1f  mean %7.1f | "
               "cpu median %6.1f us  mean %6.1f\n",
               names[a], median[a], t[a][runs / 10], t[a][runs - 1 - runs / 10], sum / runs,
               cpu_median[a], csum / runs);
    }
    printf("  libvram-preload.so - bare: %+.1f us wall, %+.1f us cpu (medians); "
           "other library - bare: %+.1f us wall, %+.1f us cpu\n",
           median[1] - median[0], cpu_median[1] - cpu_median[0], median[2] - median[0],
           cpu_median[2] - cpu_median[0]);
    return 0;
}
