# SPDX-License-Identifier: MIT
# Package.cmake -- `make package`: a Debian package (CPack's DEB generator)
# of everything Install.cmake installs, named vram_<version>_<arch>.deb.
#
# Build it from a tree configured with -DCMAKE_INSTALL_PREFIX=/usr (the
# Makefile's `package` target does): the paths compiled into the binaries
# (the Slurm plug-in's default preload=, the vram binary's library
# directory) come from the configured prefix, so the package installs
# where the build was configured for.
#
# One package, the Slurm plug-in included: spank_vram.so links nothing but
# libc (Slurm's functions come from the srun or slurmstepd that loads it),
# so it pulls no dependency the rest does not, and on a machine without
# Slurm it is an inert file. The run-time dependencies come from
# dpkg-shlibdeps over the installed ELF files (libc6, libjson-c5, zlib1g,
# libncurses6/libtinfo6, libmicrohttpd12 with the live tools), so they
# follow what the build actually links.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vram)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "vram")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "GPU memory management for deep learning: allocator, quotas, monitoring")
set(CPACK_PACKAGE_CONTACT "vram maintainers <vram@localhost>" CACHE STRING
    "Maintainer field of the Debian package")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_OUTPUT_FILE_PREFIX ${PROJECT_BINARY_DIR}/packages)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for libvram.so.0 and the ldconfig trigger, so that
# programs linked with -lvram find it without LD_LIBRARY_PATH.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# vram plan --model traces PyTorch programs; the plug-in serves Slurm.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, python3-torch")
# The preload library dlopens libunwind.so.8 for the call sites of vram
# record (1,657 instructions a call site where glibc's backtrace() takes
# 22,940, BENCHMARKS.md); without it, it falls back to backtrace().
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libunwind8")
set(CPACK_DEBIAN_PACKAGE_ENHANCES "slurm-client, slurmd")
set(CPACK_PACKAGE_DESCRIPTION
"libvram is a GPU memory allocator library with TensorFlow's strategies
(preallocation, a fixed fraction, an absolute limit, growth, logical
devices) and an expandable strategy, usable from C, Python and as
PyTorch's CUDA allocator. libvram-preload.so enforces per-process or
per-group GPU memory quotas on unmodified CUDA programs (vram run,
srun --gpu-mem through the Slurm plug-in). The vram command replays and
analyzes allocation traces, plans a training job's peak memory, and shows
live use (stat, top, a Prometheus exporter).")

if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "The Debian package installs under ${CMAKE_INSTALL_PREFIX}; "
                 "configure with -DCMAKE_INSTALL_PREFIX=/usr for one that follows Debian's layout")
endif()

# Debian's copyright file: the licence, where every package keeps its own.
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR}
        RENAME copyright)

# `make package` (and cpack) run the build's preinstall step, which by
# default walks the whole build, tests included, to check it is up to date
# (19 s of a 40 s cpack run here). The Makefile builds before installing or
# packaging, so installing does not rebuild.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

include(CPack)
