# SPDX-License-Identifier: MIT
# fuzz.cmake -- the fuzz targets (tests/fuzz/, docs/INTERNALS.md "Fuzzing";
# included by tests/CMakeLists.txt). Each fuzz_NAME.c defines
# LLVMFuzzerTestOneInput over one input surface; its seeds and every input
# that once broke it are under tests/fuzz/corpus/NAME.
#  - In the fuzz build (VRAM_SANITIZE=fuzzer, clang; `make fuzz` makes it
#    with tests/fuzz/run_fuzzers.sh) each is a libFuzzer program, fuzz_NAME.
#  - In every other build, fuzz_NAME_replay runs its corpus once through
#    tests/fuzz/replay.c (CTest fuzz_NAME_replay, label unit): a plain
#    regression test that needs no libFuzzer, under ASan+UBSan in that build.
#  - And CTest fuzz_libfuzzer (label fuzz; slow, so only the plain build)
#    makes the fuzz build beside this one and runs each target 10 s: exit 77
#    where clang's libFuzzer is missing.
set(VRAM_FUZZ_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)
set(VRAM_FUZZERS "")

# vram_fuzzer(NAME SOURCES extra.c... LIBS lib...)
function(vram_fuzzer name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS;DIRS" ${ARGN})
  if(VRAM_SANITIZE STREQUAL "fuzzer")
    set(target fuzz_${name})
    add_executable(${target} fuzz/fuzz_${name}.c fuzz/artifacts.c ${F_SOURCES})
    target_compile_definitions(${target} PRIVATE VRAM_LIBFUZZER
                               VRAM_FUZZ_ARTIFACTS="${CMAKE_BINARY_DIR}/artifacts")
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  else()
    set(target fuzz_${name}_replay)
    add_executable(${target} fuzz/fuzz_${name}.c fuzz/replay.c ${F_SOURCES})
    target_compile_definitions(${target} PRIVATE VRAM_FUZZ_REPLAY)
    add_test(NAME ${target} COMMAND ${target} ${VRAM_FUZZ_CORPUS}/${name})
    set_tests_properties(${target} PROPERTIES LABELS "unit")
  endif()
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src ${F_DIRS})
  target_link_libraries(${target} PRIVATE ${F_LIBS})
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(VRAM_FUZZERS ${VRAM_FUZZERS} ${target} PARENT_SCOPE)
endfunction()

vram_fuzzer(trace LIBS vram_static)
vram_fuzzer(config LIBS vram_static m)
vram_fuzzer(plan LIBS vram_plan)
if(VRAM_LIVE_TOOLS)
  vram_fuzzer(exporter SOURCES ${PROJECT_SOURCE_DIR}/tools/vram/exporter_http.c
                              ${PROJECT_SOURCE_DIR}/tools/vram/exporter_client.c
              DIRS ${PROJECT_SOURCE_DIR}/tools/vram LIBS PkgConfig::MHD vram_static)
endif()
add_custom_target(fuzzers DEPENDS ${VRAM_FUZZERS})

if(NOT VRAM_SANITIZE STREQUAL "fuzzer")
  # fuzz_plan's own deterministic mutational fuzzer, bounded in time, which
  # also runs `vram plan --config` with hostile flags (tests/fuzz/fuzz_plan.c).
  add_executable(fuzz_plan fuzz/fuzz_plan.c)
  target_link_libraries(fuzz_plan PRIVATE vram_plan)
  target_include_directories(fuzz_plan PRIVATE ${PROJECT_SOURCE_DIR}/src)
  set_target_properties(fuzz_plan PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME fuzz_plan COMMAND fuzz_plan $<TARGET_FILE:vram_cli>
           ${PROJECT_SOURCE_DIR}/data/measurements/configs)
  set_tests_properties(fuzz_plan PROPERTIES LABELS "unit;fuzz" TIMEOUT 120
                       ENVIRONMENT "VRAM_FUZZ_SECONDS=10")

  add_test(NAME fuzz_libfuzzer COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzzers.sh
           ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/fuzz 10)
  set_tests_properties(fuzz_libfuzzer PROPERTIES LABELS "fuzz;slow" SKIP_RETURN_CODE 77
                       TIMEOUT 900 RUN_SERIAL TRUE)
endif()
