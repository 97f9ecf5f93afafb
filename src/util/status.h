// Status and Expected<T>: the error currency across module boundaries.
// A Status is either ok() or carries a code and a human-readable message that names
// what was wrong (file, field, value). Expected<T> holds a T or a non-ok Status.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kvserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed or out of range
  kNotFound,         // a file, key or tensor does not exist
  kCorrupt,          // a file's content violates its format
  kUnsupported,      // well-formed but not handled (unknown arch, dtype, ...)
  kOutOfMemory,      // a budget (KV blocks, bytes) is exhausted
  kIoError,          // the OS refused (open, mmap, read)
  kInternal,         // a bug: an invariant did not hold
  kUnavailable,      // a service is not there or did not answer in time (try again later)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "Corrupt: <message>" (or "OK").
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Return early from a function returning Status or Expected<U>.
#define KVS_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::kvserve::Status _kvs_st = (expr);    \
    if (!_kvs_st.ok()) return _kvs_st;     \
  } while (0)

#define KVS_CONCAT_INNER(a, b) a##b
#define KVS_CONCAT(a, b) KVS_CONCAT_INNER(a, b)
// KVS_ASSIGN_OR_RETURN(auto x, make_x());
#define KVS_ASSIGN_OR_RETURN(lhs, expr) KVS_ASSIGN_OR_RETURN_IMPL(KVS_CONCAT(_kvs_e, __LINE__), lhs, expr)
#define KVS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// Invariant check that stays on in release builds: a violated invariant is a bug and
// continuing would corrupt data (e.g. the KV cache), so abort with a message.
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);
#define KVS_ASSERT(cond, msg) \
  ((cond) ? (void)0 : ::kvserve::assert_fail(#cond, __FILE__, __LINE__, (msg)))

}  // namespace kvserve
