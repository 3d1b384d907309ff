// The diagnosis catalogue's entries (supervisor/explain.hpp), for explain.cpp's
// table: each takes the failure's text (its message, then its last output
// lines) and the launcher's facts, and gives a cause and a fix, or nothing.
// explain_gpu.cpp holds the CUDA and NCCL entries, explain_host.cpp those
// that the host and the launcher tell (memory, crashes, limits, the
// network), explain.cpp PyTorch's own.
//
// Internal to the supervisor library; pure functions, thread-compatible.
#pragma once

#include <optional>
#include <regex>
#include <string>

#include "supervisor/explain.hpp"

namespace ddprun::supervisor::explain {

using Match = std::optional<Explanation>;

// The first match of `pattern` in `text`; its groups index the result.
std::optional<std::smatch> Find(const std::string& text, const char* pattern);
bool Has(const std::string& text, const char* needle);
Explanation Lines(std::string cause, std::string fix);

// explain_gpu.cpp
Match CollectiveTimeout(const std::string& text, const ExplainContext& c);
Match GlooTimeout(const std::string& text, const ExplainContext& c);
Match DdpCollectiveTimeout(const std::string& text, const ExplainContext& c);
Match DdpSetUpTimeout(const std::string& text, const ExplainContext& c);
Match CollectivesDiverged(const std::string& text, const ExplainContext& c);
Match MonitoredBarrier(const std::string& text, const ExplainContext&);
Match CudaOutOfMemory(const std::string& text, const ExplainContext& c);
Match DuplicateGpu(const std::string& text, const ExplainContext& c);
Match DeviceAssert(const std::string& text, const ExplainContext& c);
Match NcclWithoutGpu(const std::string& text, const ExplainContext& c);
Match InvalidDeviceOrdinal(const std::string& text, const ExplainContext& c);
Match NcclSharedMemory(const std::string& text, const ExplainContext& c);

// explain_host.cpp
Match OomKilled(const std::string& text, const ExplainContext& c);
Match NativeCrash(const std::string& text, const ExplainContext& c);
Match CrashedAtExit(const std::string& text, const ExplainContext& c);
Match AddressInUse(const std::string& text, const ExplainContext& c);
Match DataLoaderBusError(const std::string& text, const ExplainContext& c);
Match ThreadLimit(const std::string& text, const ExplainContext& c);
Match SharedMemoryFull(const std::string& text, const ExplainContext& c);
Match NoSpace(const std::string& text, const ExplainContext& c);
Match FileTooLarge(const std::string& text, const ExplainContext& c);
Match TooManyOpenFiles(const std::string& text, const ExplainContext& c);
Match CheckpointShortWrite(const std::string& text, const ExplainContext& c);
Match AddressSpaceLimit(const std::string& text, const ExplainContext& c);
Match NetworkInterface(const std::string& text, const ExplainContext& c);
Match GlooLoopbackPeer(const std::string& text, const ExplainContext& c);
Match StaleGroupAddress(const std::string& text, const ExplainContext& c);

}  // namespace ddprun::supervisor::explain
