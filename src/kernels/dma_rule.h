// The piece size that keeps a stream of DMA transfers at the queues' peak (docs/hardware-model.md §1.4,
// "How a transfer is split").
#pragma once

#include <cstdint>

#include "sightline/device/spec.h"

namespace sightline::kernels {

// The bytes a queue moves at its peak in F / (transfer slots - 1), F the fixed cost per transfer: the
// smallest piece whose data hides the fixed cost of the transfers behind it on its queue.
uint64_t stream_min_piece_bytes(const device::Spec& spec);

}  // namespace sightline::kernels
