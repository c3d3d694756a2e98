// Fields most records leave empty (a symlink's target, a file's hard links beyond its first
// name), kept behind one pointer so that an empty one costs 8 bytes instead of a std::string's
// 32 or a std::vector's 24: a daemon keeps one record per name, millions of them. Both are
// values (copies are deep) with the part of std::string / std::vector that records use.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvfs {

class RareString {
 public:
  RareString() = default;
  RareString(std::string s) { Assign(std::move(s)); }        // NOLINT: implicit, like std::string
  RareString(const char* s) : RareString(std::string(s)) {}  // NOLINT
  RareString(const RareString& o) { *this = o; }
  RareString(RareString&&) noexcept = default;
  RareString& operator=(const RareString& o) {
    if (this != &o) s_ = o.s_ ? std::make_unique<std::string>(*o.s_) : nullptr;
    return *this;
  }
  RareString& operator=(RareString&&) noexcept = default;
  RareString& operator=(std::string s) {
    Assign(std::move(s));
    return *this;
  }

  const std::string& str() const { return s_ ? *s_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads like a std::string
  size_t size() const { return s_ ? s_->size() : 0; }
  bool empty() const { return size() == 0; }
  const char* data() const { return str().data(); }
  // Empty: a buffer of nothing, not an allocation (a decoder may copy 0 bytes into it).
  char* data() {
    static char nothing[1];
    return s_ ? s_->data() : nothing;
  }
  void resize(size_t n) {
    if (n == 0) {
      s_.reset();
    } else {
      Mutable().resize(n);
    }
  }
  bool allocated() const { return s_ != nullptr; }  // an empty one never is
  bool operator==(const RareString& o) const { return str() == o.str(); }
  bool operator==(std::string_view o) const { return str() == o; }

 private:
  void Assign(std::string s) {
    if (s.empty()) {
      s_.reset();
    } else {
      s_ = std::make_unique<std::string>(std::move(s));
    }
  }
  std::string& Mutable() {
    if (!s_) s_ = std::make_unique<std::string>();
    return *s_;
  }
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }
  std::unique_ptr<std::string> s_;
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
  T& operator[](size_t i) { return (*v_)[i]; }
  const T& operator[](size_t i) const { return (*v_)[i]; }

  void push_back(T t) { Mutable().push_back(std::move(t)); }
  void clear() { v_.reset(); }
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
  bool allocated() const { return v_ != nullptr; }  // an empty one never is

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
