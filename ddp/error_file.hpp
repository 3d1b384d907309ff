// The worker side of torchrun's error file: what PyTorch's @record writes
// when a Python worker fails, for C++ workers. The launcher names the file in
// TORCHELASTIC_ERROR_FILE; the failure report and the agents' decisions read
// it (a worker that died because a peer went away is told apart by its
// message, e.g. "Connection reset by peer").
#pragma once

#include <string>

namespace ddprun::ddp {

// Writes {"message": <message>, "timestamp": <seconds since the epoch>} to
// $TORCHELASTIC_ERROR_FILE; does nothing when it is unset or empty. Returns
// false when the file could not be written. Call it once, as the worker fails.
bool RecordError(const std::string& message);

}  // namespace ddprun::ddp
