# shoal_cc_library(NAME <name> SRCS ... DEPS ...)
#   One static library per module. Our own warnings are errors; dependencies listed in DEPS are
#   PUBLIC so the graph of target_link_libraries mirrors DESIGN.md §2.
# shoal_cc_test(NAME <name> SRCS ... DEPS ... [LABELS ...])
#   One GoogleTest binary registered with ctest through gtest_discover_tests. Its sources are
#   compiled as unity batches of SHOAL_TEST_UNITY_BATCH files (gtest, gmock, gRPC and protobuf
#   headers parsed once per batch, not once per file: most of a test file's compile time); a
#   test file's helpers therefore live in a namespace named after the file, never a bare
#   anonymous one. Files with their own compile definitions are compiled alone (CMake's rule).

set(SHOAL_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)
# clang (the asan preset) checks abseil's thread-safety annotations: a member read without the
# mutex its ABSL_GUARDED_BY names does not compile.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND SHOAL_WARNINGS -Wthread-safety)
endif()

# TSan builds: every executable gets tools/absl_tsan_annotations.cc, which makes Debian's
# uninstrumented absl::Mutex visible to ThreadSanitizer (otherwise every guarded access races).
set(SHOAL_TSAN_SRCS "")
if(CMAKE_CXX_FLAGS MATCHES "sanitize=thread")
  set(SHOAL_TSAN_SRCS ${PROJECT_SOURCE_DIR}/tools/absl_tsan_annotations.cc)
endif()

function(shoal_cc_library)
  cmake_parse_arguments(L "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${L_NAME} STATIC ${L_SRCS})
  target_include_directories(${L_NAME} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_compile_options(${L_NAME} PRIVATE ${SHOAL_WARNINGS})
  target_link_libraries(${L_NAME} PUBLIC ${L_DEPS})
endfunction()

function(shoal_cc_binary)
  cmake_parse_arguments(B "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${B_NAME} ${B_SRCS} ${SHOAL_TSAN_SRCS})
  target_compile_options(${B_NAME} PRIVATE ${SHOAL_WARNINGS})
  target_link_libraries(${B_NAME} PRIVATE ${B_DEPS})
endfunction()

set(SHOAL_TEST_UNITY_BATCH 4 CACHE STRING "test files per unity batch (0: one per target, 1: off)")
function(shoal_cc_test)
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS} ${SHOAL_TSAN_SRCS})
  if(NOT SHOAL_TEST_UNITY_BATCH EQUAL 1)
    set_target_properties(${T_NAME} PROPERTIES UNITY_BUILD ON
      UNITY_BUILD_BATCH_SIZE ${SHOAL_TEST_UNITY_BATCH})
    if(SHOAL_TSAN_SRCS)
      set_source_files_properties(${SHOAL_TSAN_SRCS} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endif()
  target_compile_options(${T_NAME} PRIVATE ${SHOAL_WARNINGS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${T_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT 600
    ENVIRONMENT "SHOAL_BIN_DIR=${SHOAL_BIN_DIR}")  # one entry: a list here would be split
endfunction()
