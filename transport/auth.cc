#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <random>

#include "kvfs/small_file.h"

namespace kvfs {
namespace {
constexpr size_t kMinSecretLen = 16;
constexpr std::string_view kClientLabel = "kvfs-auth-v1 client";
constexpr std::string_view kServerLabel = "kvfs-auth-v1 server";
}  // namespace

Result<SharedSecret> SharedSecret::FromBytes(std::string bytes) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r')) bytes.pop_back();
  if (bytes.size() < kMinSecretLen) {
    return Status::Invalid("shared secret must be at least " + std::to_string(kMinSecretLen) +
                           " bytes");
  }
  return SharedSecret(std::move(bytes));
}

Result<SharedSecret> SharedSecret::FromFile(const std::string& path) {
  // A secret is 16 bytes to a few hundred; 64 KiB is far past any real one, and /dev/zero or
  // a FIFO given by mistake fails at once instead of hanging the start.
  KVFS_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(path, 64 << 10, "shared secret file"));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn("shared secret file {} is readable by group or others", path);
  }
  auto secret = FromBytes(std::move(bytes));
  if (!secret.ok()) return Status::Invalid(secret.status().message() + " (" + path + ")");
  return secret;
}

wire::Nonce RandomNonce() {
  wire::Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    // OpenSSL's generator failing is near impossible; fall back rather than send zeros.
    std::random_device rd;
    for (auto& b : n) b = static_cast<uint8_t>(rd());
  }
  return n;
}

wire::Proof ComputeProof(const SharedSecret& secret, AuthRole role, const wire::Nonce& client,
                         const wire::Nonce& server, std::string_view server_node) {
  std::string msg(role == AuthRole::kClient ? kClientLabel : kServerLabel);
  msg.append(reinterpret_cast<const char*>(client.data()), client.size());
  msg.append(reinterpret_cast<const char*>(server.data()), server.size());
  if (role == AuthRole::kServer) msg.append(server_node);
  wire::Proof out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.bytes().data(), static_cast<int>(secret.bytes().size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  return out;
}

bool ProofMatches(const wire::Proof& a, const wire::Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

ClientHandshake::ClientHandshake(SharedSecret secret, std::string node, std::string expect)
    : secret_(std::move(secret)), node_(std::move(node)), expect_(std::move(expect)) {
  if (node_.size() > wire::kMaxNameLen) node_.resize(wire::kMaxNameLen);
}

wire::Hello ClientHandshake::Start() {
  client_nonce_ = RandomNonce();
  step_ = Step::kSentHello;
  return wire::Hello{node_, client_nonce_};
}

Result<wire::Auth> ClientHandshake::OnChallenge(const wire::Challenge& challenge) {
  if (step_ != Step::kSentHello) return Status::Error(EPROTO, "unexpected CHALLENGE");
  if (secret_.empty()) return Status::Error(EACCES, "no shared secret configured");
  server_nonce_ = challenge.nonce;
  step_ = Step::kSentAuth;
  return wire::Auth{ComputeProof(secret_, AuthRole::kClient, client_nonce_, server_nonce_)};
}

Status ClientHandshake::OnAuthOk(const wire::AuthOk& ok) {
  if (step_ != Step::kSentAuth) return Status::Error(EPROTO, "unexpected AUTH_OK");
  const wire::Proof want =
      ComputeProof(secret_, AuthRole::kServer, client_nonce_, server_nonce_, ok.node);
  if (!ProofMatches(want, ok.proof)) {
    return Status::Error(EACCES, "peer failed authentication (wrong shared secret)");
  }
  if (!expect_.empty() && ok.node != expect_) {
    return Status::Error(ENXIO, "the address answers as " + ok.node + ", not " + expect_ +
                                    " (two nodes advertise one address?)");
  }
  step_ = Step::kDone;
  return Status::Ok();
}

Result<wire::Challenge> ServerHandshake::OnHello(const wire::Hello& hello) {
  if (step_ != Step::kAwaitHello) {
    step_ = Step::kFailed;
    return Status::Error(EPROTO, "unexpected HELLO");
  }
  peer_node_ = hello.node;
  client_nonce_ = hello.nonce;
  server_nonce_ = RandomNonce();
  step_ = Step::kAwaitAuth;
  return wire::Challenge{server_nonce_};
}

Result<wire::AuthOk> ServerHandshake::OnAuth(const wire::Auth& auth) {
  if (step_ != Step::kAwaitAuth) {
    step_ = Step::kFailed;
    return Status::Error(EPROTO, "unexpected AUTH");
  }
  const wire::Proof want = ComputeProof(secret_, AuthRole::kClient, client_nonce_, server_nonce_);
  if (secret_.empty() || !ProofMatches(want, auth.proof)) {
    step_ = Step::kFailed;
    return Status::Error(EACCES, "authentication failed (wrong or missing shared secret)");
  }
  step_ = Step::kDone;
  return wire::AuthOk{ComputeProof(secret_, AuthRole::kServer, client_nonce_, server_nonce_, node_),
                      node_};
}

}  // namespace kvfs
