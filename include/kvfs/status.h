// Errors are values: every fallible call returns a Status or a Result<T>. The code is a positive
// errno so the FUSE boundary maps it without a table; the message says what went wrong for logs
// and for kvfsctl.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace kvfs {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(int err, std::string message) { return Status(err, std::move(message)); }
  // Shorthands for the codes the engine uses most.
  static Status IoError(std::string m) { return Error(EIO, std::move(m)); }
  static Status NotFound(std::string m) { return Error(ENOENT, std::move(m)); }
  static Status NoSpace(std::string m) { return Error(ENOSPC, std::move(m)); }
  static Status Invalid(std::string m) { return Error(EINVAL, std::move(m)); }
  // Stored bytes that are not what was written (a checksum mismatch, an undecodable
  // segment): EIO to the application, and IsCorruption() for the code that must drop them.
  // A failed device read is a plain IoError: it may be transient.
  static Status Corruption(std::string m) { return Status(EIO, std::move(m), Kind::kCorruption); }
  // A shared store (the cluster) refused a change because what it was based on changed
  // meanwhile (another node changed or removed an object of the batch): the caller's view has
  // been brought up to date and the operation may be tried again. EAGAIN when it gives up.
  static Status Conflict(std::string m) { return Status(EAGAIN, std::move(m), Kind::kConflict); }

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }  // positive errno; 0 when ok
  bool IsCorruption() const { return kind_ == Kind::kCorruption; }
  bool IsConflict() const { return kind_ == Kind::kConflict; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  enum class Kind : uint8_t { kPlain, kCorruption, kConflict };
  Status(int err, std::string message, Kind kind = Kind::kPlain)
      : err_(err <= 0 ? EIO : err), kind_(kind), message_(std::move(message)) {}
  int err_ = 0;
  Kind kind_ = Kind::kPlain;
  std::string message_;
};

// Result<T> holds a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) v_ = Status::Error(EIO, "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

inline std::string Status::ToString() const {
  if (ok()) return "OK";
  const std::string what = (IsCorruption() ? "corruption: " : "") + message_;
  return what.empty() ? ("errno " + std::to_string(err_))
                      : (what + " (errno " + std::to_string(err_) + ")");
}

}  // namespace kvfs

#define KVFS_CONCAT_INNER(a, b) a##b
#define KVFS_CONCAT(a, b) KVFS_CONCAT_INNER(a, b)

#define KVFS_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::kvfs::Status _kvfs_st = (expr);    \
    if (!_kvfs_st.ok()) return _kvfs_st; \
  } while (0)

#define KVFS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define KVFS_ASSIGN_OR_RETURN(lhs, expr) \
  KVFS_ASSIGN_OR_RETURN_IMPL(KVFS_CONCAT(_kvfs_res_, __LINE__), lhs, expr)
