// A stand-in for a tool that interposes dlopen, as compute-sanitizer's injection library does: its dlopen finds the
// real one with dlsym(RTLD_NEXT, "dlopen") while it is inside, and a dlopen that re-enters it from there aborts (the
// real tool waits for itself forever). Says once on stderr that it intercepted a call.

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace {
thread_local bool t_inside = false;
bool g_said = false;
}  // namespace

extern "C" void* dlopen(const char* file, int mode) {
  if (t_inside) {
    std::fputs("dlopen_guard: dlopen re-entered from inside dlopen\n", stderr);
    std::abort();
  }
  t_inside = true;
  using DlopenFn = void* (*)(const char*, int);
  auto real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  void* handle = real != nullptr ? real(file, mode) : nullptr;
  t_inside = false;
  if (!g_said) {
    g_said = true;
    std::fputs(real != nullptr ? "dlopen_guard: intercepted\n" : "dlopen_guard: no next dlopen\n", stderr);
  }
  return handle;
}
