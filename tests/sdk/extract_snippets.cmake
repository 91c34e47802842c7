# Writes OUT: every ```cpp block of the markdown file DOC, in order, as the body of one function (later
# blocks use what earlier ones declared, as the page reads) that
# has `x` and `w` (the study's tensors) in scope, so that the page's code is compiled against the
# public headers (tests/sdk/CMakeLists.txt) and cannot drift from the API.
file(READ "${DOC}" text)
# A CMake list splits at ';': hide them while the blocks are a list.
string(REPLACE ";" "@SEMICOLON@" text "${text}")
string(REGEX MATCHALL "```cpp\n[^`]*```" blocks "${text}")
set(body "")
foreach(block IN LISTS blocks)
  string(REGEX REPLACE "^```cpp\n" "" block "${block}")
  string(REGEX REPLACE "```$" "" block "${block}")
  string(APPEND body "${block}")
endforeach()
string(REPLACE "@SEMICOLON@" ";" body "${body}")
list(LENGTH blocks count)
if(count EQUAL 0)
  message(FATAL_ERROR "${DOC} has no cpp blocks")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${DOC} by tests/sdk/extract_snippets.cmake; do not edit.
#include <algorithm>
#include <memory>
#include <span>

#include <fmt/format.h>

#include <sightline/compile.h>
#include <sightline/kernels.h>
#include <sightline/neuron.h>
#include <sightline/profiler.h>
#include <sightline/sightline.h>

using namespace sightline;
using sightline::profiler::ProfilerActivity;

// Compiled, never run: the tutorial's code against the public API.
void tutorial_snippets(const Tensor& x, const Tensor& w) {
${body}}

int main() { return 0; }
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
