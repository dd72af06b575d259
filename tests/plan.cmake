# SPDX-License-Identifier: MIT
# plan.cmake -- the tests of `vram plan` (included by tests/CMakeLists.txt):
# the model's unit tests, the CLI, and the accuracy against the 61 measured
# training runs and the 16 generation runs of data/measurements (docs/PLAN.md).
vram_unit_test(test_plan SOURCES unit/test_plan.c)
target_link_libraries(test_plan PRIVATE vram_plan)

add_executable(test_plan_accuracy unit/test_plan_accuracy.c)
target_link_libraries(test_plan_accuracy PRIVATE vram_plan)
set_target_properties(test_plan_accuracy PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME plan_accuracy COMMAND test_plan_accuracy ${PROJECT_SOURCE_DIR}/data/measurements)
set_tests_properties(plan_accuracy PROPERTIES LABELS "unit")

# Generation with a KV cache against the measured generate() runs.
add_test(NAME plan_gen_accuracy COMMAND test_plan_accuracy --generate
         ${PROJECT_SOURCE_DIR}/data/measurements)
set_tests_properties(plan_gen_accuracy PROPERTIES LABELS "unit")

add_test(NAME cli_plan COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_plan.sh
         $<TARGET_FILE:vram_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_plan PROPERTIES LABELS "cli")

# Tracing any PyTorch program without a GPU (python/vram/plan.py), with the
# first python3 that has PyTorch (Debian's is /usr/bin/python3, which may
# not be the python3 first on PATH); exit 77 (skipped) without one.
set(VRAM_TORCH_PYTHON "" CACHE FILEPATH "python3 with PyTorch for the tracing tests")
if(NOT VRAM_TORCH_PYTHON)
  find_program(_vram_py3 python3)
  foreach(_py ${_vram_py3} /usr/bin/python3)
    if(EXISTS ${_py})
      execute_process(COMMAND ${_py} -c
        "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)"
        RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(_rc EQUAL 0)
        set(VRAM_TORCH_PYTHON ${_py} CACHE FILEPATH "python3 with PyTorch" FORCE)
        break()
      endif()
    endif()
  endforeach()
endif()
if(VRAM_TORCH_PYTHON)
  set(_plan_py ${VRAM_TORCH_PYTHON})
else()
  set(_plan_py python3)
endif()
add_test(NAME plan_tracing COMMAND ${_plan_py} ${CMAKE_CURRENT_SOURCE_DIR}/python/plan_tracing.py)
set_tests_properties(plan_tracing PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77 ENVIRONMENT
  "VRAM_BIN=$<TARGET_FILE:vram_cli>;PYTHONDONTWRITEBYTECODE=1")

# Models named instead of programs: a sample of torchvision's zoo, Hugging
# Face from a config (a stand-in transformers), quantized layers refused.
add_test(NAME plan_named COMMAND ${_plan_py} ${CMAKE_CURRENT_SOURCE_DIR}/python/plan_named.py)
set_tests_properties(plan_named PROPERTIES LABELS "cli;slow" SKIP_RETURN_CODE 77 ENVIRONMENT
  "PYTHONDONTWRITEBYTECODE=1")

# fuzz_plan, the fuzz test over config files and flags: tests/fuzz/fuzz.cmake.
