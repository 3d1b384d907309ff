#include "supervisor/line_splitter.hpp"

namespace ddprun::supervisor {

void LineSplitter::Feed(std::string_view data, const LineFn& emit) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      while (partial_.size() >= max_line_) {
        std::string piece = partial_.substr(0, max_line_) + "\n";
        emit(piece);
        partial_.erase(0, max_line_);
      }
      return;
    }
    if (partial_.empty()) {
      emit(data.substr(0, nl + 1));
    } else {
      partial_.append(data.substr(0, nl + 1));
      emit(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::Finish(const LineFn& emit) {
  if (partial_.empty()) return;
  partial_.push_back('\n');
  emit(partial_);
  partial_.clear();
}

}  // namespace ddprun::supervisor
