#include "supervisor/explain.hpp"

#include <functional>
#include <vector>

namespace ddprun::supervisor {

namespace {

// The text a failure is matched against: its traceback or message, then its
// last output lines (a worker without an error file still printed why).
std::string TextOf(const FailureRecord& f) { return f.message + "\n" + f.output_tail; }

// The quoted name after `marker` ("No module named 'torch'" gives torch).
std::optional<std::string> QuotedAfter(const std::string& text, const std::string& marker) {
  auto at = text.rfind(marker);
  if (at == std::string::npos) return std::nullopt;
  size_t open = at + marker.size();
  if (open >= text.size() || (text[open] != '\'' && text[open] != '"')) return std::nullopt;
  size_t close = text.find(text[open], open + 1);
  if (close == std::string::npos || close == open + 1 || close - open > 200) return std::nullopt;
  return text.substr(open + 1, close - open - 1);
}

struct Entry {
  const char* signature;
  std::function<std::optional<Explanation>(const std::string&, const ExplainContext&)> match;
};

std::optional<Explanation> ModuleNotFound(const std::string& text, const ExplainContext& c) {
  auto module = QuotedAfter(text, "ModuleNotFoundError: No module named ");
  if (!module) return std::nullopt;
  const std::string top = module->substr(0, module->find('.'));
  Explanation e;
  e.cause = "the workers' Python cannot import " + *module +
            (c.interpreter.empty()
                 ? ""
                 : ": they ran " + c.interpreter + " (from " + c.interpreter_source + ")");
  e.fix = "install " + top +
          " into that Python's environment, or run the workers under the Python that has it: "
          "PYTHON_EXEC=/path/to/python, or the ddprun installed in that environment";
  return e;
}

const std::vector<Entry>& Catalogue() {
  static const std::vector<Entry> kEntries = {
      {"module not found", ModuleNotFound},
  };
  return kEntries;
}

}  // namespace

std::optional<Explanation> Explain(const FailureRecord& failure, const ExplainContext& context) {
  const std::string text = TextOf(failure);
  for (const auto& entry : Catalogue()) {
    if (auto e = entry.match(text, context)) {
      e->signature = entry.signature;
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace ddprun::supervisor
