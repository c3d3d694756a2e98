#include "prefix_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <nlohmann/json.hpp>

#include "json_text.h"

namespace kvfs::fs {
namespace {

using Digest = std::array<unsigned char, 32>;

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Update(const void* data, size_t len) { EVP_DigestUpdate(ctx_.get(), data, len); }
  Digest Final() {
    Digest d{};
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), d.data(), &len);
    return d;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx_;
};

std::string Hex(const Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(d.size() * 2);
  for (unsigned char b : d) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

constexpr uint64_t kMaxToken = 0xFFFFFFFFull;

Result<std::vector<uint32_t>> ParseJsonArray(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return Status::Invalid("not a JSON array of token ids");
  std::vector<uint32_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& v = j[i];
    // The parser stores every non-negative integer as unsigned: anything else is out of range.
    if (!v.is_number_unsigned() || v.get<uint64_t>() > kMaxToken)
      return Status::Invalid("element " + std::to_string(i) + " (" + JsonText(v) +
                             ") is not a token id in 0..4294967295");
    out.push_back(static_cast<uint32_t>(v.get<uint64_t>()));
  }
  return out;
}

Result<std::vector<uint32_t>> ParseWords(std::string_view text) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view word = text.substr(start, i - start);
    uint64_t value = 0;
    bool ok = word.size() <= 10;
    for (char c : word) {
      if (!std::isdigit(static_cast<unsigned char>(c))) ok = false;
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || value > kMaxToken)
      return Status::Invalid("token " + std::to_string(out.size()) + " ('" + std::string(word) +
                             "') is not a token id in 0..4294967295");
    out.push_back(static_cast<uint32_t>(value));
  }
  return out;
}

}  // namespace

Result<std::vector<uint32_t>> ParseTokenIds(std::string_view text) {
  size_t first = 0;
  while (first < text.size() && std::isspace(static_cast<unsigned char>(text[first]))) ++first;
  if (first < text.size() && text[first] == '[') return ParseJsonArray(text);
  return ParseWords(text);
}

std::vector<ChunkName> PrefixHashNames(const std::vector<uint32_t>& tokens, uint64_t chunk_tokens,
                                       bool include_partial, std::string_view seed) {
  std::vector<ChunkName> names;
  if (chunk_tokens == 0) return names;
  Sha256 s;
  s.Update(seed.data(), seed.size());
  Digest prev = s.Final();
  for (uint64_t start = 0; start < tokens.size(); start += chunk_tokens) {
    const uint64_t n = std::min<uint64_t>(chunk_tokens, tokens.size() - start);
    if (n < chunk_tokens && !include_partial) break;
    // Little-endian whatever the host: names must agree across machines.
    std::vector<unsigned char> bytes(prev.begin(), prev.end());
    bytes.reserve(prev.size() + 4 * n);
    for (uint64_t i = start; i < start + n; ++i) {
      const uint32_t t = tokens[i];
      for (int shift = 0; shift < 32; shift += 8)
        bytes.push_back(static_cast<unsigned char>(t >> shift));
    }
    Sha256 h;
    h.Update(bytes.data(), bytes.size());
    prev = h.Final();
    names.push_back({Hex(prev), start, n});
  }
  return names;
}

}  // namespace kvfs::fs
