# SPDX-License-Identifier: MIT
# Install.cmake -- what `cmake --install` (and `make install`, and the
# Debian packages) puts where, with GNUInstallDirs' directories. Every rule
# names the Debian package it belongs to as its COMPONENT, so that
# cmake/debian/build-debs.sh can install each package's files alone
# (`cmake --install BUILD --component NAME`); a plain install takes all:
#
#   libvram0          lib*/libvram.so.X.Y.Z, .so.0  the library (SONAME libvram.so.0)
#   libvram-dev       lib*/libvram.so, libvram.a, include/vram.h, vram_version.h,
#                     lib*/pkgconfig/vram.pc, lib*/cmake/vram/, man3/vram.3
#   libvram-preload0  lib*/libvram-preload.so.0    the quota enforcer (LD_PRELOAD)
#   vram              bin/vram, man1, man5/policy.conf.5, bash completion,
#                     share/vram/contrib/ (Grafana, alert rules, systemd),
#                     share/doc/vram/ (README, BENCHMARKS, docs/)
#   vram-slurm        <Slurm plug-in dir>/spank_vram.so, its plugstack.conf line
#   python3-vram      the Python package: lib/python3/dist-packages/vram under
#                     /usr (Debian's layout), else share/vram/python/vram
#
# Included at the end of CMakeLists.txt, once every target exists. The
# installed vram binary finds its preload library and Python package
# relative to its own directory (tools/common/installdirs.c), so a tree
# installed under DESTDIR or unpacked from a package works where it is.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- where the Python package goes ----
# Under /usr, Debian's: the interpreter's dist-packages, so that python3-vram
# is importable without a path; elsewhere beside the rest of vram, where
# `vram plan --model` finds it and PYTHONPATH can point.
set(VRAM_PYTHON_INSTALL_DIR "" CACHE PATH
    "where the Python package vram/ is installed (empty: lib/python3/dist-packages under /usr, else share/vram/python)")
if(VRAM_PYTHON_INSTALL_DIR)
  set(VRAM_PYTHONDIR ${VRAM_PYTHON_INSTALL_DIR})
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(VRAM_PYTHONDIR lib/python3/dist-packages)
else()
  set(VRAM_PYTHONDIR ${CMAKE_INSTALL_DATADIR}/vram/python)
endif()

# ---- paths compiled into the binaries ----
file(RELATIVE_PATH VRAM_BINDIR_TO_LIBDIR ${CMAKE_INSTALL_FULL_BINDIR}
     ${CMAKE_INSTALL_FULL_LIBDIR})
get_filename_component(VRAM_PYTHONDIR_FULL ${VRAM_PYTHONDIR} ABSOLUTE BASE_DIR ${CMAKE_INSTALL_PREFIX})
file(RELATIVE_PATH VRAM_BINDIR_TO_PYTHONDIR ${CMAKE_INSTALL_FULL_BINDIR} ${VRAM_PYTHONDIR_FULL})
target_sources(vram_cli PRIVATE ${PROJECT_SOURCE_DIR}/tools/common/installdirs.c)
# The preload library's file name is its SONAME: libvram-preload.so.0.
set(VRAM_PRELOAD_NAME libvram-preload.so.0)
target_compile_definitions(vram_cli PRIVATE
  VRAM_BINDIR_TO_LIBDIR="${VRAM_BINDIR_TO_LIBDIR}"
  VRAM_BINDIR_TO_PYTHONDIR="${VRAM_BINDIR_TO_PYTHONDIR}"
  VRAM_PRELOAD_NAME="${VRAM_PRELOAD_NAME}")
set(VRAM_INSTALLED_PRELOAD ${CMAKE_INSTALL_FULL_LIBDIR}/${VRAM_PRELOAD_NAME})

# ---- the libraries, the command, the header ----
install(TARGETS vram
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libvram0
        NAMELINK_COMPONENT libvram-dev)
install(TARGETS vram_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libvram-dev)
# The enforcer is preloaded by its file name, never linked: no -l link.
install(TARGETS vram_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT libvram-preload0 NAMELINK_SKIP)
install(TARGETS vram_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT vram)
install(FILES ${PROJECT_SOURCE_DIR}/include/vram.h ${PROJECT_BINARY_DIR}/include/vram_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT libvram-dev)

# ---- pkg-config and the CMake package ----
# vram.pc names its directories from its own (${pcfiledir}): from
# <libdir>/pkgconfig back to the prefix, then down again. A directory given
# as an absolute path outside the prefix stays absolute.
set(VRAM_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE ${VRAM_PC_DIR})
  message(FATAL_ERROR "CMAKE_INSTALL_LIBDIR must be relative to the prefix for a relocatable vram.pc")
endif()
file(RELATIVE_PATH VRAM_PC_TO_PREFIX /prefix/${VRAM_PC_DIR} /prefix)
string(REGEX REPLACE "/$" "" VRAM_PC_TO_PREFIX "${VRAM_PC_TO_PREFIX}")
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE ${CMAKE_INSTALL_${kind}})
    set(VRAM_PC_${kind} ${CMAKE_INSTALL_${kind}})
  else()
    set(VRAM_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/vram.pc.in ${PROJECT_BINARY_DIR}/vram.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/vram.pc DESTINATION ${VRAM_PC_DIR} COMPONENT libvram-dev)

get_target_property(VRAM_SOVERSION vram SOVERSION)
set(VRAM_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/vram)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vram-config.cmake.in
  ${PROJECT_BINARY_DIR}/vram-config.cmake INSTALL_DESTINATION ${VRAM_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
# 0.x: a new minor version may change the API, so only the same X.Y matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vram-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vram-config.cmake
              ${PROJECT_BINARY_DIR}/vram-config-version.cmake
        DESTINATION ${VRAM_CMAKEDIR} COMPONENT libvram-dev)

# ---- the Slurm plug-in ----
# Into Slurm's plug-in directory (PluginDir), so that plugstack.conf can
# name it without a path: Debian's and Ubuntu's Slurm packages use
# /usr/lib/<multiarch>/slurm-wlm, Slurm's own default is <libdir>/slurm.
# VRAM_SLURM_PLUGINDIR overrides (relative: under the prefix); empty, the
# default follows the prefix at every configure.
set(VRAM_SLURM_PLUGINDIR "" CACHE PATH
    "where the Slurm plug-in spank_vram.so is installed (empty: Slurm's plug-in directory)")
if(VRAM_SLURM_PLUGINDIR)
  set(VRAM_SLURM_DIR ${VRAM_SLURM_PLUGINDIR})
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr" AND CMAKE_LIBRARY_ARCHITECTURE)
  set(VRAM_SLURM_DIR ${CMAKE_INSTALL_LIBDIR}/slurm-wlm)
else()
  set(VRAM_SLURM_DIR ${CMAKE_INSTALL_LIBDIR}/slurm)
endif()
option(VRAM_REQUIRE_SLURM "fail to configure without the Slurm plug-in (packages need it)" OFF)
if(TARGET spank_vram)
  # The preload= default: the library this installation puts in place.
  target_compile_definitions(spank_vram PRIVATE
    VRAM_SPANK_DEFAULT_PRELOAD="${VRAM_INSTALLED_PRELOAD}")
  install(TARGETS spank_vram LIBRARY DESTINATION ${VRAM_SLURM_DIR} COMPONENT vram-slurm)
  if(IS_ABSOLUTE ${VRAM_SLURM_DIR})
    set(VRAM_SPANK_INSTALLED ${VRAM_SLURM_DIR}/spank_vram.so)
  else()
    set(VRAM_SPANK_INSTALLED ${CMAKE_INSTALL_PREFIX}/${VRAM_SLURM_DIR}/spank_vram.so)
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/contrib/slurm/plugstack.conf.in
                 ${PROJECT_BINARY_DIR}/contrib/slurm/plugstack.conf @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/contrib/slurm/plugstack.conf
          DESTINATION ${CMAKE_INSTALL_DATADIR}/vram/contrib/slurm COMPONENT vram-slurm)
elseif(VRAM_REQUIRE_SLURM)
  message(FATAL_ERROR "VRAM_REQUIRE_SLURM: slurm/spank.h not found (Debian: libslurm-dev)")
endif()

# ---- the Python package, contrib files, documents ----
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/vram DESTINATION ${VRAM_PYTHONDIR}
        COMPONENT python3-vram
        PATTERN __pycache__ EXCLUDE PATTERN "*.pyc" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/contrib/grafana ${PROJECT_SOURCE_DIR}/contrib/prometheus
        DESTINATION ${CMAKE_INSTALL_DATADIR}/vram/contrib COMPONENT vram)
configure_file(${PROJECT_SOURCE_DIR}/contrib/systemd/vram-exporter.service.in
               ${PROJECT_BINARY_DIR}/contrib/systemd/vram-exporter.service @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/contrib/systemd/vram-exporter.service
        DESTINATION ${CMAKE_INSTALL_DATADIR}/vram/contrib/systemd COMPONENT vram)
install(FILES ${PROJECT_SOURCE_DIR}/contrib/policy/policy.conf
        DESTINATION ${CMAKE_INSTALL_DATADIR}/vram/contrib/policy COMPONENT vram)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/BENCHMARKS.md
              ${PROJECT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT vram)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        COMPONENT vram)

include(${CMAKE_CURRENT_LIST_DIR}/Man.cmake)
