// Peer authentication: HMAC-SHA256 challenge-response over the cluster's shared secret, both
// ways, before any other request.
//
//   client -> HELLO{node, client_nonce}
//   server -> CHALLENGE{server_nonce}
//   client -> AUTH{HMAC(secret, "kvfs-auth-v1 client" | client_nonce | server_nonce)}
//   server -> AUTH_OK{HMAC(secret, "kvfs-auth-v1 server" | client_nonce | server_nonce)}
//
// Fresh random nonces on both sides make a recorded exchange useless for replay; the distinct
// role labels stop a peer from reflecting one side's proof back as the other's. Proofs are
// compared in constant time. The handshakes below are pure state machines (no sockets) so they
// are tested on their own and shared by every transport.
#pragma once

#include "kvfs/status.h"
#include "kvfs/transport.h"
#include "kvfs/wire.h"

namespace kvfs {

enum class AuthRole { kClient, kServer };

wire::Nonce RandomNonce();
wire::Proof ComputeProof(const SharedSecret& secret, AuthRole role, const wire::Nonce& client,
                         const wire::Nonce& server);
bool ProofMatches(const wire::Proof& a, const wire::Proof& b);  // constant time

class ClientHandshake {
 public:
  explicit ClientHandshake(SharedSecret secret, std::string node = "kvfs");
  wire::Hello Start();
  Result<wire::Auth> OnChallenge(const wire::Challenge& challenge);
  // EACCES when the server's proof is wrong (it does not know the secret).
  Status OnAuthOk(const wire::AuthOk& ok);

 private:
  const SharedSecret secret_;  // a copy: a handshake may outlive the options it came from
  std::string node_;
  wire::Nonce client_nonce_{}, server_nonce_{};
  enum class Step { kStart, kSentHello, kSentAuth, kDone } step_ = Step::kStart;
};

class ServerHandshake {
 public:
  explicit ServerHandshake(SharedSecret secret) : secret_(std::move(secret)) {}
  Result<wire::Challenge> OnHello(const wire::Hello& hello);
  // EACCES when the client's proof is wrong.
  Result<wire::AuthOk> OnAuth(const wire::Auth& auth);
  bool authenticated() const { return step_ == Step::kDone; }
  const std::string& peer_node() const { return peer_node_; }

 private:
  const SharedSecret secret_;  // a copy: a handshake may outlive the options it came from
  std::string peer_node_;
  wire::Nonce client_nonce_{}, server_nonce_{};
  enum class Step { kAwaitHello, kAwaitAuth, kDone, kFailed } step_ = Step::kAwaitHello;
};

}  // namespace kvfs
