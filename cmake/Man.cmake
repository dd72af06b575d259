# SPDX-License-Identifier: MIT
# Man.cmake -- man pages and bash completion (included by Install.cmake).
#
# The man pages are made at build time (cmake/gen-man.sh): vram(1), with
# the environment table as its ENVIRONMENT section, and one vram-CMD(1) per
# command of `vram help`, by help2man from the --help texts; vram(3) from
# include/vram.h (cmake/gen-man3.sh); policy.conf(5) from
# cmake/policy.conf.5 with contrib/policy/policy.conf as its example. They
# are installed compressed (gzip -9n), as Debian's policy asks and man reads
# them everywhere. VRAM_MAN: AUTO makes them where help2man is installed,
# ON requires it (the Debian package does), OFF leaves them out.
set(VRAM_MAN AUTO CACHE STRING "man pages from the --help texts: AUTO, ON or OFF (help2man)")
set_property(CACHE VRAM_MAN PROPERTY STRINGS AUTO ON OFF)
if(NOT VRAM_MAN STREQUAL "OFF")
  find_program(VRAM_HELP2MAN help2man)
  if(NOT VRAM_HELP2MAN AND VRAM_MAN STREQUAL "ON")
    message(FATAL_ERROR "VRAM_MAN=ON: help2man not found (Debian: help2man)")
  elseif(NOT VRAM_HELP2MAN)
    message(STATUS "help2man not found: no man pages (scripts/install-deps.sh --package)")
  endif()
endif()
if(VRAM_HELP2MAN AND NOT VRAM_MAN STREQUAL "OFF")
  set(VRAM_MAN_DIR ${PROJECT_BINARY_DIR}/man)
  set(VRAM_MAN_STAMP ${PROJECT_BINARY_DIR}/man/stamp)
  # The pages depend on the binary (its --help texts), the header and the
  # policy page; every page is rewritten when one changes, so a removed
  # command leaves no stale page.
  add_custom_command(OUTPUT ${VRAM_MAN_STAMP}
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${VRAM_MAN_DIR}/man1 ${VRAM_MAN_DIR}/man3
            ${VRAM_MAN_DIR}/man5 ${VRAM_MAN_DIR}/gz
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gen-man.sh $<TARGET_FILE:vram_cli>
            ${PROJECT_VERSION} ${PROJECT_SOURCE_DIR} ${VRAM_MAN_DIR}
    COMMAND ${CMAKE_COMMAND} -E touch ${VRAM_MAN_STAMP}
    DEPENDS vram_cli ${CMAKE_CURRENT_LIST_DIR}/gen-man.sh
            ${CMAKE_CURRENT_LIST_DIR}/gen-man3.sh ${CMAKE_CURRENT_LIST_DIR}/policy.conf.5
            ${PROJECT_SOURCE_DIR}/include/vram.h
            ${PROJECT_SOURCE_DIR}/contrib/policy/policy.conf
    COMMENT "Generating the man pages" VERBATIM)
  add_custom_target(vram_man ALL DEPENDS ${VRAM_MAN_STAMP})
  install(DIRECTORY ${VRAM_MAN_DIR}/gz/man1 ${VRAM_MAN_DIR}/gz/man5
          DESTINATION ${CMAKE_INSTALL_MANDIR} COMPONENT vram)
  install(DIRECTORY ${VRAM_MAN_DIR}/gz/man3 DESTINATION ${CMAKE_INSTALL_MANDIR}
          COMPONENT libvram-dev)
endif()

# Bash completion: contrib/bash-completion/vram asks the installed vram for
# its commands, options and their values (`vram CMD --complete-...`), so it
# follows the program without being regenerated. Installed where bash-completion
# loads completions on demand, under the prefix.
set(VRAM_BASH_COMPLETION_DIR ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
    CACHE PATH "where the bash completion of vram is installed")
install(FILES ${PROJECT_SOURCE_DIR}/contrib/bash-completion/vram
        DESTINATION ${VRAM_BASH_COMPLETION_DIR} COMPONENT vram)
