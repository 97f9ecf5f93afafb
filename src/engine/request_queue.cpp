#include "engine/request_queue.h"

#include <utility>

namespace kvserve {

// ---- RequestHandle (declared in include/kvserve/request.h) ----

namespace {

void append_delta(StreamDelta& into, StreamDelta&& d) {
  into.text += d.text;
  into.tokens.insert(into.tokens.end(), d.tokens.begin(), d.tokens.end());
  for (TokenLogprob& lp : d.logprobs) into.logprobs.push_back(std::move(lp));
  // Prompt scores come once, in the first delta, so at most one side holds any.
  if (into.prompt_logprobs.empty()) into.prompt_logprobs = std::move(d.prompt_logprobs);
}

}  // namespace

bool RequestHandle::next(StreamDelta* out, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return !pending_.empty() || finished_; });
  if (pending_.empty()) return false;
  *out = std::move(pending_.front());
  pending_.pop_front();
  while (!pending_.empty()) {
    append_delta(*out, std::move(pending_.front()));
    pending_.pop_front();
  }
  return true;
}

bool RequestHandle::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

RequestResult RequestHandle::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  return result_;
}

RequestResult RequestHandle::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_;
}

void RequestHandle::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_ = true;
}

bool RequestHandle::cancel_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancel_;
}

void RequestHandleWriter::push(RequestHandle& h, StreamDelta delta) {
  if (delta.text.empty() && delta.tokens.empty() && delta.logprobs.empty() && delta.prompt_logprobs.empty())
    return;
  {
    std::lock_guard<std::mutex> lock(h.mu_);
    if (h.finished_) return;
    h.pending_.push_back(std::move(delta));
  }
  h.cv_.notify_all();
}

void RequestHandleWriter::finish(RequestHandle& h, RequestResult result) {
  {
    std::lock_guard<std::mutex> lock(h.mu_);
    if (h.finished_) return;
    h.result_ = std::move(result);
    h.finished_ = true;
  }
  h.cv_.notify_all();
}

// ---- RequestQueue ----

Status RequestQueue::push(PendingRequest r, size_t also_waiting) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return unsupported("the engine is shutting down");
    if (items_.size() + also_waiting >= capacity_)
      return out_of_memory("queue full: " + std::to_string(capacity_) + " requests are waiting");
    items_.push_back(std::move(r));
  }
  cv_.notify_one();
  return Status::ok_status();
}

std::vector<PendingRequest> RequestQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PendingRequest> out;
  out.swap(items_);
  return out;
}

Status RequestQueue::post(EngineTask task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return unsupported("the engine is shutting down");
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return Status::ok_status();
}

std::vector<EngineTask> RequestQueue::drain_tasks() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineTask> out;
  out.swap(tasks_);
  return out;
}

void RequestQueue::wait_for_work(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return !items_.empty() || !tasks_.empty() || woken_; });
  woken_ = false;
}

void RequestQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void RequestQueue::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

}  // namespace kvserve
