# Packages of the installed tree, made by `cpack` in a build directory (ci/package.sh): peerlab_<version>_amd64.deb
# and peerlab-<version>-Linux.tar.gz.
#   .deb     installs under /usr (peerlab on PATH). Depends: the distribution's libraries its programs link, computed
#            by dpkg-shlibdeps on the build machine (build it on the distribution it is for). The NVIDIA driver
#            (libcuda, NVML) is the node's; the `peerlab` binary links the CUDA runtime statically and loads NCCL
#            only to read its version, so health, topo and qualify need nothing more; the benchmarks' CUDA runtime
#            ships in lib/peerlab; NCCL (the benchmarks' baselines) is recommended: libnccl2 of NVIDIA's repository.
#   .tar.gz  the same tree under peerlab-<version>-Linux/ (bin, libexec, lib, share, include), to unpack anywhere:
#            peerlab finds its files relative to itself.

# The CUDA runtime the benchmarks link (shared, so harness/faults can interpose on it), shipped beside them.
if(TARGET CUDA::cudart)
  get_target_property(cudart_location CUDA::cudart IMPORTED_LOCATION)
  if(cudart_location)
    file(REAL_PATH "${cudart_location}" cudart_file)
    install(FILES "${cudart_file}" DESTINATION ${CMAKE_INSTALL_LIBDIR}/peerlab
            RENAME libcudart.so.${CUDAToolkit_VERSION_MAJOR})
  endif()
endif()

# cpack installs what is built (ci/package.sh builds the peerlab_qualify target, which holds everything installed),
# without building every target first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(CPACK_PACKAGE_NAME peerlab)
set(CPACK_PACKAGE_VENDOR peerlab)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "peerlab qualify checks a GPU machine's topology, health and every peer-to-peer path against what its links allow; peerlab health is a node health check for schedulers.")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "peerlab")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libnccl2")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-utils")
set(CPACK_STRIP_FILES OFF)
# The .deb under /usr, the archive as a relocatable tree.
file(WRITE ${PROJECT_BINARY_DIR}/CPackProjectConfig.cmake [=[
if(CPACK_GENERATOR STREQUAL "DEB")
  set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
else()
  set(CPACK_PACKAGING_INSTALL_PREFIX /)
endif()
]=])
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/CPackProjectConfig.cmake)
include(CPack)
