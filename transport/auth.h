// Peer authentication: HMAC-SHA256 challenge-response over the cluster's shared secret, both
// ways, before any other request.
//
//   client -> HELLO{node, client_nonce}
//   server -> CHALLENGE{server_nonce}
//   client -> AUTH{HMAC(secret, "kvfs-auth-v1 client" | client_nonce | server_nonce)}
//   server -> AUTH_OK{HMAC(secret, "kvfs-auth-v1 server" | client_nonce | server_nonce | node),
//                     node}
//
// Fresh random nonces on both sides make a recorded exchange useless for replay; the distinct
// role labels stop a peer from reflecting one side's proof back as the other's. Proofs are
// compared in constant time. The server names itself in AUTH_OK, inside its proof; a client
// that dialed an address to reach one node refuses another (ENXIO), so two nodes advertising
// one address, or a registration that outlived its node, never pass one node's copies or
// chunks off as another's. The handshakes below are pure state machines (no sockets) so they
// are tested on their own and shared by every transport.
#pragma once

#include "kvfs/status.h"
#include "kvfs/transport.h"
#include "kvfs/wire.h"

namespace kvfs {

enum class AuthRole { kClient, kServer };

wire::Nonce RandomNonce();
// `server_node` is bound into the server's proof only (the name AUTH_OK carries).
wire::Proof ComputeProof(const SharedSecret& secret, AuthRole role, const wire::Nonce& client,
                         const wire::Nonce& server, std::string_view server_node = {});
bool ProofMatches(const wire::Proof& a, const wire::Proof& b);  // constant time

class ClientHandshake {
 public:
  // `expect`: the server's node name this client means to reach (empty: any).
  explicit ClientHandshake(SharedSecret secret, std::string node = "kvfs", std::string expect = {});
  wire::Hello Start();
  Result<wire::Auth> OnChallenge(const wire::Challenge& challenge);
  // EACCES when the server's proof is wrong (it does not know the secret); ENXIO when it is
  // another node than the one expected.
  Status OnAuthOk(const wire::AuthOk& ok);

 private:
  const SharedSecret secret_;  // a copy: a handshake may outlive the options it came from
  std::string node_;
  std::string expect_;
  wire::Nonce client_nonce_{}, server_nonce_{};
  enum class Step { kStart, kSentHello, kSentAuth, kDone } step_ = Step::kStart;
};

class ServerHandshake {
 public:
  ServerHandshake(SharedSecret secret, std::string node)
      : secret_(std::move(secret)), node_(std::move(node)) {
    if (node_.size() > wire::kMaxNameLen) node_.resize(wire::kMaxNameLen);
  }
  Result<wire::Challenge> OnHello(const wire::Hello& hello);
  // EACCES when the client's proof is wrong.
  Result<wire::AuthOk> OnAuth(const wire::Auth& auth);
  bool authenticated() const { return step_ == Step::kDone; }
  const std::string& peer_node() const { return peer_node_; }

 private:
  const SharedSecret secret_;  // a copy: a handshake may outlive the options it came from
  std::string node_;           // this server's name, sent in AUTH_OK
  std::string peer_node_;
  wire::Nonce client_nonce_{}, server_nonce_{};
  enum class Step { kAwaitHello, kAwaitAuth, kDone, kFailed } step_ = Step::kAwaitHello;
};

}  // namespace kvfs
