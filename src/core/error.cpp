#include "sightline/error.h"

#include <cstdio>
#include <cstdlib>

namespace sightline {

void assert_fail(const char* condition, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "sightline internal error: %s:%d: assertion '%s' failed%s%s\n", file, line, condition,
               detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace sightline
