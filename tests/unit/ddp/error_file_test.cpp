#include "ddp/error_file.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "supervisor/failure_report.hpp"

namespace ddprun::ddp {
namespace {

TEST_CASE("a C++ worker's error file reads back as torchrun's, any text in the message") {
  char path[] = "/tmp/ddprun_error_file_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  setenv("TORCHELASTIC_ERROR_FILE", path, 1);
  const std::string message = "allreduce: \"quoted\" \\ tab\t newline\n Connection reset by peer";
  CHECK(RecordError(message));
  supervisor::FailureRecord record;
  REQUIRE(supervisor::ReadErrorFile(path, record));
  CHECK(record.message == message);
  CHECK(record.timestamp > 0);
  unsetenv("TORCHELASTIC_ERROR_FILE");
  CHECK(RecordError("no file: nothing written"));
  unlink(path);
}

}  // namespace
}  // namespace ddprun::ddp
