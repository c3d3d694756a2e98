// kvfsctl hash --tokens FILE --chunk-tokens N [--prefix DIR]: the prefix-hash chunk names of a
// token sequence (prefix_hash.h has the scheme), one per line, so a native client or a shell
// script can find the chunks of a prompt without reimplementing the hash. With --prefix the
// names become paths, and --json also says which of them exist and how long the cached prefix
// is (connectors stop at the first miss).
//
// Exit status: 0 names printed; 1 the token file cannot be read or does not parse.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "json_text.h"
#include "kvfsctl.h"
#include "prefix_hash.h"

namespace kvfs::fs {
namespace {

// A token file is text of a few bytes per token: 256 MiB is tens of millions of tokens. The
// cap keeps a file that never ends (--tokens /dev/zero read until memory ran out) an error.
constexpr size_t kMaxTokenFile = 256u << 20;

std::string ReadAll(const std::string& file) {
  const int fd = file == "-" ? 0 : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Failure{kExitFailure, "kvfsctl hash: cannot read " + file + ": " + std::strerror(errno)};
  std::string text, error;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = "cannot read " + file + ": " + std::strerror(errno);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxTokenFile) {
      error =
          file + ": more than " + std::to_string(kMaxTokenFile >> 20) + " MiB: not a token file";
      break;
    }
  }
  if (fd != 0) ::close(fd);
  if (!error.empty()) throw Failure{kExitFailure, "kvfsctl hash: " + error};
  return text;
}

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

int Hash(const HashOptions& o) {
  auto tokens = ParseTokenIds(ReadAll(o.tokens_file));
  if (!tokens.ok())
    throw Failure{kExitFailure,
                  "kvfsctl hash: " + o.tokens_file + ": " + tokens.status().message()};
  const auto chunk_tokens = static_cast<uint64_t>(o.chunk_tokens);
  std::vector<ChunkName> names = PrefixHashNames(*tokens, chunk_tokens, o.include_partial, o.seed);
  if (!o.json) {
    for (const auto& c : names) std::printf("%s\n", Join(o.prefix, c.name).c_str());
    return kExitOk;
  }
  nlohmann::json chunks = nlohmann::json::array();
  size_t cached_prefix = 0;
  bool prefix_intact = true;
  for (size_t i = 0; i < names.size(); ++i) {
    const ChunkName& c = names[i];
    nlohmann::json j{{"index", i},
                     {"name", c.name},
                     {"first_token", c.first},
                     {"tokens", c.tokens},
                     {"partial", c.tokens < chunk_tokens}};
    if (!o.prefix.empty()) {
      const std::string path = Join(o.prefix, c.name);
      struct stat st {};
      const bool exists = ::stat(path.c_str(), &st) == 0;
      prefix_intact = prefix_intact && exists;
      if (prefix_intact) ++cached_prefix;
      j["path"] = path;
      j["exists"] = exists;
    }
    chunks.push_back(std::move(j));
  }
  nlohmann::json report{{"scheme", "sha256-chain-u32le"},       {"seed", o.seed},
                        {"chunk_tokens", chunk_tokens},         {"tokens", tokens->size()},
                        {"include_partial", o.include_partial}, {"chunks", chunks}};
  if (!o.prefix.empty()) {
    report["prefix"] = o.prefix;
    report["cached_prefix_chunks"] = cached_prefix;
  }
  std::printf("%s\n", JsonText(report, 2).c_str());
  return kExitOk;
}

}  // namespace kvfs::fs
