#include "ddp/error_file.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "env/names.hpp"

namespace ddprun::ddp {

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

bool RecordError(const std::string& message) {
  const char* path = std::getenv(env::kErrorFile);
  if (path == nullptr || *path == '\0') return true;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const std::string text =
      "{\"message\": " + JsonString(message) + ", \"timestamp\": " +
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "}\n";
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace ddprun::ddp
