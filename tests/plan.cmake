# plan.cmake -- the tests of `vram plan` (included by tests/CMakeLists.txt):
# the model's unit tests, the CLI, and the accuracy against the 61 measured
# training runs of data/measurements (docs/PLAN.md).
vram_unit_test(test_plan SOURCES unit/test_plan.c)
target_link_libraries(test_plan PRIVATE vram_plan)

add_executable(test_plan_accuracy unit/test_plan_accuracy.c)
target_link_libraries(test_plan_accuracy PRIVATE vram_plan)
set_target_properties(test_plan_accuracy PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME plan_accuracy COMMAND test_plan_accuracy ${PROJECT_SOURCE_DIR}/data/measurements)
set_tests_properties(plan_accuracy PROPERTIES LABELS "unit")

add_test(NAME cli_plan COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_plan.sh
         $<TARGET_FILE:vram_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_plan PROPERTIES LABELS "cli")
