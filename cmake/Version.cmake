# SPDX-License-Identifier: MIT
# Version.cmake -- the project's VERSION (project() in CMakeLists.txt) is the
# one source of vram's version: vram_version.h (VRAM_VERSION, hence
# `vram --version`), vram.pc, the CMake package, the Debian packages and the
# Python package all take it from there. Included right after project(),
# before any target, so that every target finds vram_version.h.

configure_file(${PROJECT_SOURCE_DIR}/include/vram_version.h.in
               ${PROJECT_BINARY_DIR}/include/vram_version.h @ONLY)
include_directories(BEFORE ${PROJECT_BINARY_DIR}/include)

# The Python package cannot run CMake when pip builds it, so it carries the
# version as a literal (python/vram/__init__.py, read by pyproject.toml):
# a configure error here if the two differ.
file(STRINGS ${PROJECT_SOURCE_DIR}/python/vram/__init__.py VRAM_PY_VERSION_LINE
     REGEX "^__version__ = ")
string(REGEX REPLACE "^__version__ = \"([^\"]*)\".*" "\\1" VRAM_PY_VERSION
       "${VRAM_PY_VERSION_LINE}")
if(NOT VRAM_PY_VERSION STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "python/vram/__init__.py has __version__ = \"${VRAM_PY_VERSION}\" "
                      "but CMakeLists.txt's project VERSION is ${PROJECT_VERSION}: "
                      "set both to the same version")
endif()

# The Debian changelog's first entry is the version being packaged: a new
# version gets its entry (what changed, for the administrators who install
# it) before it builds.
file(STRINGS ${PROJECT_SOURCE_DIR}/cmake/debian/changelog VRAM_DEB_CHANGELOG_TOP
     LIMIT_COUNT 1)
if(NOT VRAM_DEB_CHANGELOG_TOP MATCHES "^vram \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "cmake/debian/changelog starts with \"${VRAM_DEB_CHANGELOG_TOP}\", "
                      "not an entry for ${PROJECT_VERSION}: add one (what changed)")
endif()
