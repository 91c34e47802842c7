// Static checks of an Executable against a Spec, before anything runs: every operand inside its
// memory (partitions, SBUF/PSUM bytes, one PSUM bank per matmul, I/O tensor bounds), the operands each
// opcode needs and only those, engines reaching only the memories they can (TensorE: SBUF in, PSUM out;
// GpSimd: no PSUM; compute engines: no HBM), semaphore and source-op indices in range.
#pragma once

#include "sightline/device/executable.h"
#include "sightline/device/spec.h"

namespace sightline::device {

// Throws sightline::Error naming the executable, the stream, the instruction index and the operand.
void validate_executable(const Executable& exe, const Spec& spec);

// Byte range [min, max) an operand touches relative to its base (offset + partition 0 for on-chip
// operands; offset into the tensor for HBM operands, partitions included).
struct ByteExtent {
  int64_t min = 0;
  int64_t max = 0;
};
ByteExtent operand_extent(const AccessPattern& ap, bool include_partitions);

}  // namespace sightline::device
