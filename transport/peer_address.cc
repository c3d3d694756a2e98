// Peer addresses as operators write them (--listen, --advertise) and as nodes publish them in
// their etcd registration. One parser for both: an address another node put in etcd is input
// like any other, and a malformed one must be refused, not crash the node that reads it.
#include <arpa/inet.h>

#include <cctype>
#include <string>

#include "kvfs/transport.h"

namespace kvfs {
namespace {

bool PlausibleHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return host.front() != '-' && host.front() != '.';
}

}  // namespace

Result<PeerAddress> ParsePeerAddress(std::string_view text) {
  const std::string shown = "'" + std::string(text) + "'";
  PeerAddress a;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return Status::Invalid("bad address " + shown + " (use [IPv6]:PORT)");
    a.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    in6_addr a6;
    if (inet_pton(AF_INET6, a.host.c_str(), &a6) != 1)
      return Status::Invalid("bad IPv6 address in " + shown);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      return Status::Invalid("bad address " + shown + " (use HOST:PORT)");
    a.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (a.host.find(':') != std::string::npos)
      return Status::Invalid("bad address " + shown + " (write IPv6 as [ADDR]:PORT)");
    in_addr a4;
    bool numeric_like = std::isdigit(static_cast<unsigned char>(a.host[0])) &&
                        a.host.find_first_not_of("0123456789.") == std::string::npos;
    if (numeric_like ? inet_pton(AF_INET, a.host.c_str(), &a4) != 1 : !PlausibleHostName(a.host))
      return Status::Invalid("bad host in address " + shown);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos)
    return Status::Invalid("bad port in address " + shown);
  unsigned long p = std::stoul(std::string(port));  // 1 to 5 digits: cannot throw
  if (p == 0 || p > 65535) return Status::Invalid("port out of range in address " + shown);
  a.port = static_cast<uint16_t>(p);
  return a;
}

bool IsWildcardHost(std::string_view host) {
  const std::string h(host);
  in_addr a4;
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return a4.s_addr == htonl(INADDR_ANY);
  in6_addr a6;
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&a6);
  return false;
}

}  // namespace kvfs
