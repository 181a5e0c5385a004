// A stand-in libcuda.so.1 that only records: each process that loads it appends "load <pid> <argv>" to
// $PEERLAB_CUDA_RECORD. It offers no driver entry point, so the CUDA runtime finds no usable driver and carries on
// without one. A test puts it first on LD_LIBRARY_PATH to tell whether a program touched CUDA at all.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace {

__attribute__((constructor)) void recordLoad() {
  const char* path = std::getenv("PEERLAB_CUDA_RECORD");
  if (path == nullptr || *path == '\0') return;
  std::ifstream cmd("/proc/self/cmdline");
  std::string argv((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  for (char& c : argv)
    if (c == '\0') c = ' ';
  const std::string line = "load " + std::to_string(::getpid()) + " " + argv + "\n";
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace
