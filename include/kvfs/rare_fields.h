// Fields most records leave empty (a symlink's target, a device number, a prefix link, user
// extended attributes, a file's hard links beyond its first name), kept behind a pointer so that an
// empty one costs 8 bytes or nothing instead of a std::string's 32 or a std::vector's 24: a daemon
// keeps one record per name, millions of them. Both are values (copies are deep).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvfs {

// A user extended attribute (setxattr(2) in the "user." namespace): the full name, "user."
// included, and its value. A record keeps them sorted by name, each name once.
struct Xattr {
  std::string name;
  std::string value;
  bool operator==(const Xattr&) const = default;
};

// The fields of a record that few records have, behind one pointer: a symlink's target, a
// device's number, the writer's prefix link and the user xattrs. A record with none of them
// allocates nothing; setting the last one back to empty frees the box. Copies are deep.
class RareFields {
 public:
  RareFields() = default;
  RareFields(const RareFields& o) { *this = o; }
  RareFields(RareFields&&) noexcept = default;
  RareFields& operator=(const RareFields& o) {
    if (this != &o) f_ = o.f_ ? std::make_unique<Fields>(*o.f_) : nullptr;
    return *this;
  }
  RareFields& operator=(RareFields&&) noexcept = default;

  const std::string& symlink_target() const { return f_ ? f_->symlink_target : Empty(); }
  uint64_t rdev() const { return f_ ? f_->rdev : 0; }
  uint64_t prefix_parent() const { return f_ ? f_->prefix_parent : 0; }
  const std::vector<Xattr>& xattrs() const { return f_ ? f_->xattrs : NoXattrs(); }
  void set_symlink_target(std::string t) {
    if (!t.empty() || f_) Mutable().symlink_target = std::move(t);
    Tidy();
  }
  void set_rdev(uint64_t v) {
    if (v != 0 || f_) Mutable().rdev = v;
    Tidy();
  }
  void set_prefix_parent(uint64_t v) {
    if (v != 0 || f_) Mutable().prefix_parent = v;
    Tidy();
  }
  // `v` sorted by name, names unique (the caller's duty: the codecs refuse anything else).
  void set_xattrs(std::vector<Xattr> v) {
    if (!v.empty() || f_) Mutable().xattrs = std::move(v);
    Tidy();
  }

  bool allocated() const { return f_ != nullptr; }  // never when all are empty
  bool operator==(const RareFields& o) const {
    return symlink_target() == o.symlink_target() && rdev() == o.rdev() &&
           prefix_parent() == o.prefix_parent() && xattrs() == o.xattrs();
  }

 private:
  struct Fields {
    std::string symlink_target;
    uint64_t rdev = 0;
    uint64_t prefix_parent = 0;
    std::vector<Xattr> xattrs;
  };
  Fields& Mutable() {
    if (!f_) f_ = std::make_unique<Fields>();
    return *f_;
  }
  void Tidy() {
    if (f_ && f_->symlink_target.empty() && f_->rdev == 0 && f_->prefix_parent == 0 &&
        f_->xattrs.empty()) {
      f_.reset();
    }
  }
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }
  static const std::vector<Xattr>& NoXattrs() {
    static const std::vector<Xattr> none;
    return none;
  }
  std::unique_ptr<Fields> f_;
};

template <class T>
class RareVector {
 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  RareVector() = default;
  RareVector(std::vector<T> v) { Assign(std::move(v)); }  // NOLINT: implicit, like the vector
  RareVector(std::initializer_list<T> v) : RareVector(std::vector<T>(v)) {}
  RareVector(const RareVector& o) { *this = o; }
  RareVector(RareVector&&) noexcept = default;
  RareVector& operator=(const RareVector& o) {
    if (this != &o) v_ = o.v_ ? std::make_unique<std::vector<T>>(*o.v_) : nullptr;
    return *this;
  }
  RareVector& operator=(RareVector&&) noexcept = default;

  size_t size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return size() == 0; }
  iterator begin() { return v_ ? v_->data() : nullptr; }
  iterator end() { return v_ ? v_->data() + v_->size() : nullptr; }
  const_iterator begin() const { return v_ ? v_->data() : nullptr; }
  const_iterator end() const { return v_ ? v_->data() + v_->size() : nullptr; }
  T& front() { return v_->front(); }
  const T& front() const { return v_->front(); }
  T& back() { return v_->back(); }
  const T& back() const { return v_->back(); }
  T& operator[](size_t i) { return (*v_)[i]; }
  const T& operator[](size_t i) const { return (*v_)[i]; }

  void push_back(T t) { Mutable().push_back(std::move(t)); }
  void clear() { v_.reset(); }
  void reserve(size_t n) {
    if (n > 0) Mutable().reserve(n);
  }
  void resize(size_t n) {
    if (n == 0) {
      v_.reset();
    } else {
      Mutable().resize(n);
    }
  }
  template <class It>
  void assign(It first, It last) {
    Assign(std::vector<T>(first, last));
  }
  iterator erase(const_iterator pos) {
    const auto i = pos - begin();
    v_->erase(v_->begin() + i);
    if (v_->empty()) {
      v_.reset();
      return nullptr;
    }
    return v_->data() + i;
  }
  // Removes every element equal to `t` (std::erase of a vector); returns how many.
  size_t erase_value(const T& t) {
    if (!v_) return 0;
    const size_t n = std::erase(*v_, t);
    if (v_->empty()) v_.reset();
    return n;
  }
  std::vector<T> to_vector() const { return v_ ? *v_ : std::vector<T>{}; }
  bool allocated() const { return v_ != nullptr; }  // an empty one never is (unless reserved)

  bool operator==(const RareVector& o) const { return to_vector_ref() == o.to_vector_ref(); }
  bool operator==(const std::vector<T>& o) const { return to_vector_ref() == o; }

 private:
  const std::vector<T>& to_vector_ref() const { return v_ ? *v_ : Empty(); }
  void Assign(std::vector<T> v) {
    if (v.empty()) {
      v_.reset();
    } else {
      v_ = std::make_unique<std::vector<T>>(std::move(v));
    }
  }
  std::vector<T>& Mutable() {
    if (!v_) v_ = std::make_unique<std::vector<T>>();
    return *v_;
  }
  static const std::vector<T>& Empty() {
    static const std::vector<T> empty;
    return empty;
  }
  std::unique_ptr<std::vector<T>> v_;
};

}  // namespace kvfs
