# Helpers that keep each module's CMakeLists.txt to one call.

set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

# Compile options shared by every peerlab target.
add_library(peerlab_options INTERFACE)
target_compile_options(peerlab_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  # GCC 12 reports false -Wrestrict positives inside std::string (GCC PR 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PEERLAB_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall,-Wno-unused-parameter,-Wno-restrict
                             -diag-suppress=177>)
target_compile_definitions(peerlab_options INTERFACE
  PEERLAB_VERSION="${PROJECT_VERSION}"
  $<$<BOOL:${PEERLAB_HAVE_MPI}>:PEERLAB_HAVE_MPI=1>
  $<$<BOOL:${PEERLAB_HAVE_NCCL_DEVICE_API}>:PEERLAB_HAVE_NCCL_DEVICE_API=1>)
target_include_directories(peerlab_options INTERFACE ${PROJECT_SOURCE_DIR})
add_library(peerlab::options ALIAS peerlab_options)

# peerlab_add_library(<name> SOURCES ... [DEPS ...])
#   Static library peerlab_<name>, alias peerlab::<name>. Includes are rooted at the repository top
#   (#include "reference/core/status.h").
function(peerlab_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(peerlab_${name} STATIC ${ARG_SOURCES})
  add_library(peerlab::${name} ALIAS peerlab_${name})
  target_link_libraries(peerlab_${name} PUBLIC peerlab::options ${ARG_DEPS})
  set_target_properties(peerlab_${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# peerlab_add_test(<source> LABEL cpu|gpu [DEPS ...] [TIMEOUT s] [ARGS ...])
#   One GoogleTest executable named after the source's stem, registered with ctest under its label.
function(peerlab_add_test source)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "DEPS;ARGS" ${ARGN})
  if(NOT PEERLAB_BUILD_TESTS)
    return()
  endif()
  if(NOT ARG_LABEL MATCHES "^(cpu|gpu)$")
    message(FATAL_ERROR "peerlab_add_test(${source}): LABEL must be cpu or gpu")
  endif()
  get_filename_component(stem ${source} NAME_WE)
  add_executable(${stem} ${source})
  target_link_libraries(${stem} PRIVATE ${ARG_DEPS} peerlab::testing GTest::gtest GTest::gmock)
  if(NOT ARG_TIMEOUT)
    if(ARG_LABEL STREQUAL "gpu")
      set(ARG_TIMEOUT 300)
    else()
      set(ARG_TIMEOUT 120)
    endif()
  endif()
  add_test(NAME ${stem} COMMAND ${stem} ${ARG_ARGS})
  set_tests_properties(${stem} PROPERTIES LABELS ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "PEERLAB_SOURCE_DIR=${PROJECT_SOURCE_DIR};NCCL_NVLS_ENABLE=0;TORCH_SYMM_MEM_DISABLE_MULTICAST=1;NVSHMEM_DISABLE_NVLS=1")
endfunction()

# peerlab_add_bench(<source> [DEPS ...])
#   One Google Benchmark executable named after the source's stem, with peerlab's benchmark main.
function(peerlab_add_bench source)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  if(NOT PEERLAB_BUILD_BENCH)
    return()
  endif()
  get_filename_component(stem ${source} NAME_WE)
  add_executable(${stem} ${source})
  target_link_libraries(${stem} PRIVATE ${ARG_DEPS} peerlab::bench_main benchmark::benchmark)
endfunction()

# peerlab_add_primitive(<name>
#     SOURCES <library sources>          (library peerlab::<name>)
#     DEPS <libraries the library links>
#     CPU_TESTS <test sources>           (label cpu)
#     GPU_TESTS <test sources>           (label gpu)
#     TEST_DEPS <extra libraries for the tests>
#     BENCH <bench source>  BENCH_DEPS <extra libraries for the bench>)
#   Adds a primitive: its library, its tests beside it and its benchmark, in one call.
function(peerlab_add_primitive name)
  cmake_parse_arguments(ARG "" "BENCH" "SOURCES;DEPS;CPU_TESTS;GPU_TESTS;TEST_DEPS;BENCH_DEPS" ${ARGN})
  peerlab_add_library(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
  foreach(t ${ARG_CPU_TESTS})
    peerlab_add_test(${t} LABEL cpu DEPS peerlab::${name} ${ARG_TEST_DEPS})
  endforeach()
  foreach(t ${ARG_GPU_TESTS})
    peerlab_add_test(${t} LABEL gpu DEPS peerlab::${name} ${ARG_TEST_DEPS})
  endforeach()
  if(ARG_BENCH)
    peerlab_add_bench(${ARG_BENCH} DEPS peerlab::${name} ${ARG_BENCH_DEPS})
  endif()
endfunction()
