#include "server/blas_env.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace shoal::server {

void EnsureBlasEnvironment(char** argv) {
  if (std::getenv("SHOAL_BLAS_ENV_SET") != nullptr) return;  // already re-executed once
  bool changed = false;
  auto set_default = [&](const char* name, const char* value) {
    if (std::getenv(name) == nullptr) {
      setenv(name, value, 1);
      changed = true;
    }
  };
  set_default("OMP_NUM_THREADS", "1");
  set_default("OPENBLAS_NUM_THREADS", "1");
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) set_default("OPENBLAS_CORETYPE", "SkylakeX");
  setenv("SHOAL_BLAS_ENV_SET", "1", 1);
  if (!changed) return;
  // Exec the resolved path, not /proc/self/exe, so the process keeps its name ("shoald") in
  // ps, top and pkill.
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  execv(self, argv);
}

}  // namespace shoal::server
