// Greedy sampling for n tokens, ignoring end-of-generation tokens so that a run's length is n:
// what tests that compare two ways of generating the same tokens ask for.
#pragma once

#include "kvserve/sampling_params.h"

namespace kvserve::test {

inline SamplingParams greedy_ignoring_eos(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

}  // namespace kvserve::test
