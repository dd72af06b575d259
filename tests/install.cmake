# SPDX-License-Identifier: MIT
# install.cmake -- the install test (included by tests/CMakeLists.txt): the
# build packaged as a Debian package, installed with apt-get inside a
# private mount namespace, and used from the installed paths only
# (tests/install/test_install.sh). Labelled slow: the sanitizer builds,
# whose binaries cannot run without their runtime, skip it.
# Debian's python3 (with python3-setuptools) installs the Python package.
if(EXISTS /usr/bin/python3)
  set(VRAM_INSTALL_PYTHON /usr/bin/python3)
else()
  set(VRAM_INSTALL_PYTHON python3)
endif()
add_test(NAME install COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_install.sh
         ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VRAM_PRELOAD_TEST_DIR}/preload_probe
         ${VRAM_FAKECUDA_DIR} ${VRAM_INSTALL_PYTHON})
set_tests_properties(install PROPERTIES LABELS "install;slow" SKIP_RETURN_CODE 77 TIMEOUT 300)
# Relocatable: installed with --prefix (under DESTDIR), moved, then built
# against with pkg-config alone and find_package (no root needed; slow:
# the sanitizer builds cannot link a plain program against their library).
add_test(NAME install_prefix COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_prefix.sh
         ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(install_prefix PROPERTIES LABELS "install;slow" SKIP_RETURN_CODE 77)
