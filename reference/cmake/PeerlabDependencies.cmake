# System dependencies, found and never downloaded.
find_package(CUDAToolkit 12.4 REQUIRED)
find_package(NCCL 2.19 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.5)
# NCCL topology XML (harness/topology) and the qualify thresholds file (harness/qualify).
pkg_check_modules(LIBXML2 REQUIRED IMPORTED_TARGET libxml-2.0>=2.9)
pkg_check_modules(TOMLPLUSPLUS REQUIRED IMPORTED_TARGET tomlplusplus>=3.0)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
find_package(Threads REQUIRED)
# The history store: SQLite (embedded default) and, when found, PostgreSQL's client library (without it a
# postgresql:// URL is refused with a message saying so).
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(LIBPQ IMPORTED_TARGET libpq)
if(PEERLAB_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(PEERLAB_BUILD_BENCH)
  find_package(benchmark 1.7 REQUIRED)
endif()

# NVML is loaded at run time (harness/health/nvml.h), never linked: nothing to find here.

set(PEERLAB_HAVE_MPI OFF)
if(NOT PEERLAB_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(PEERLAB_HAVE_MPI ON)
    find_program(PEERLAB_MPIEXEC NAMES mpirun mpiexec HINTS ${MPI_HOME} PATH_SUFFIXES bin)
  elseif(PEERLAB_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "PEERLAB_WITH_MPI=ON but MPI was not found")
  endif()
endif()

set(PEERLAB_HAVE_NCCL_DEVICE_API ${NCCL_HAS_DEVICE_API})

message(STATUS "peerlab: CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_VERSION} (device API: ${PEERLAB_HAVE_NCCL_DEVICE_API}), "
               "hwloc ${HWLOC_VERSION}, MPI: ${PEERLAB_HAVE_MPI}, "
               "CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}, PostgreSQL client: ${LIBPQ_FOUND}")
