#include "supervisor/line_splitter.hpp"

namespace ddprun::supervisor {

void LineSplitter::Feed(std::string_view data, const LineFn& emit) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
    if (partial_.empty() && nl != std::string_view::npos && nl <= max_line_) {
      emit(data.substr(0, take));  // the common case: a whole line, no copy
      data.remove_prefix(take);
      continue;
    }
    partial_.append(data.substr(0, take));
    data.remove_prefix(take);
    bool complete = partial_.back() == '\n';
    while (partial_.size() - (complete ? 1 : 0) > max_line_) {
      emit(std::string_view(partial_).substr(0, max_line_));  // the line goes on
      partial_.erase(0, max_line_);
    }
    if (complete) {
      emit(partial_);
      partial_.clear();
    }
  }
}

void LineSplitter::Finish(const LineFn& emit) {
  if (partial_.empty()) return;
  partial_.push_back('\n');
  emit(partial_);
  partial_.clear();
}

}  // namespace ddprun::supervisor
