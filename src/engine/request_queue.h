// The hand-off between caller threads and the engine thread: RequestQueue carries submitted
// requests to the loop; RequestHandleWriter is the engine's side of a RequestHandle.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kvserve/request.h"
#include "util/status.h"

namespace kvserve {

using SteadyTime = std::chrono::steady_clock::time_point;

// One accepted request on its way to the engine thread.
struct PendingRequest {
  std::shared_ptr<RequestHandle> handle;
  GenerationRequest request;
  SteadyTime submitted;
};

// Bounded multi-producer queue drained by the single engine thread.
class RequestQueue {
 public:
  explicit RequestQueue(size_t capacity) : capacity_(capacity) {}

  // out_of_memory ("queue full") when `capacity` requests already wait, counting
  // `also_waiting` (requests drained into the scheduler but not yet running);
  // unsupported once closed.
  Status push(PendingRequest r, size_t also_waiting);
  // Everything queued, oldest first.
  std::vector<PendingRequest> drain();
  // Blocks until a request arrives, wake() is called or `wait` passes.
  void wait_for_work(std::chrono::milliseconds wait);
  void wake();
  // Refuses every later push().
  void close();
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PendingRequest> items_;
  bool closed_ = false;
  bool woken_ = false;
};

// Engine-side writes to a RequestHandle (the caller side reads through its public methods).
class RequestHandleWriter {
 public:
  // Queues output for next(); empty deltas are dropped.
  static void push(RequestHandle& h, StreamDelta delta);
  // Stores the final result and wakes readers; later pushes are ignored.
  static void finish(RequestHandle& h, RequestResult result);
};

}  // namespace kvserve
