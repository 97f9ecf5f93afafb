// The hand-off between caller threads and the engine thread: RequestQueue carries submitted
// requests to the loop; RequestHandleWriter is the engine's side of a RequestHandle.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kvserve/request.h"
#include "util/status.h"

namespace kvserve {

using SteadyTime = std::chrono::steady_clock::time_point;

// What a pin request (Engine::pin_prefix) reports back, written by the engine thread before it
// finishes the request's handle (whose mutex orders the write before the caller's read).
struct PinOutcome {
  Status status;            // out_of_memory when the pin cap would be exceeded
  int64_t pinned_tokens = 0;
};

// One accepted request on its way to the engine thread.
struct PendingRequest {
  std::shared_ptr<RequestHandle> handle;
  GenerationRequest request;
  SteadyTime submitted;
  // Set for POST /cache/pin: once the prompt has run (one greedy token), the engine pins its
  // full blocks and writes the outcome here before finishing the handle.
  std::shared_ptr<PinOutcome> pin;
};


// Work a caller thread needs done on the engine thread (the only one that may touch the KV
// cache): unpin, flush. Runs between steps; the task reports back through its own captures.
using EngineTask = std::function<void()>;

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
  // Queues a task for the loop (not counted against `capacity`). unsupported once closed.
  Status post(EngineTask task);
  // Every posted task, oldest first.
  std::vector<EngineTask> drain_tasks();
  // Blocks until a request or task arrives, wake() is called or `wait` passes.
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
  std::vector<EngineTask> tasks_;
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
