// Finds stop strings in streamed text and decides how much text is safe to emit: text that
// could still become the start of a stop string is held back until it cannot.
#pragma once

#include <string>
#include <vector>

namespace kvserve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends text; returns the part that is now safe to emit. After a stop string is found,
  // stopped() is true and the returned text ends just before it.
  std::string push(const std::string& text);
  // Whatever is held back (call at the end when no stop string matched).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted
  bool stopped_ = false;
};

}  // namespace kvserve
