// Authentication: the pure handshakes both ways, and the shared-secret file.
#include "auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace kvfs {
namespace {

SharedSecret Secret(const std::string& s) { return SharedSecret::FromBytes(s).value(); }

TEST(Auth, SameSecretAuthenticatesBothWays) {
  SharedSecret secret = Secret("correct horse battery staple");
  ClientHandshake client(secret, "node-a");
  ServerHandshake server(secret, "node-b");
  auto challenge = server.OnHello(client.Start());
  ASSERT_TRUE(challenge.ok());
  auto auth = client.OnChallenge(*challenge);
  ASSERT_TRUE(auth.ok());
  auto ok = server.OnAuth(*auth);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(server.authenticated());
  EXPECT_EQ(server.peer_node(), "node-a");
  EXPECT_TRUE(client.OnAuthOk(*ok).ok());
}

TEST(Auth, ClientRefusesAServerThatIsAnotherNode) {
  // Two nodes advertising one address (or a registration that outlived its node): the node
  // answering must be the one the client meant, and the name it gives is under its proof.
  SharedSecret secret = Secret("the-cluster-secret-1234");
  auto run = [&](const std::string& expect, auto&& tamper) {
    ClientHandshake client(secret, "node1", expect);
    ServerHandshake server(secret, "node3");
    auto auth = client.OnChallenge(server.OnHello(client.Start()).value()).value();
    wire::AuthOk ok = server.OnAuth(auth).value();
    EXPECT_EQ(ok.node, "node3");
    tamper(ok);
    return client.OnAuthOk(ok);
  };
  auto keep = [](wire::AuthOk&) {};
  EXPECT_TRUE(run("node3", keep).ok());
  EXPECT_TRUE(run("", keep).ok());
  Status other = run("node2", keep);
  EXPECT_EQ(other.err(), ENXIO);
  EXPECT_NE(other.message().find("answers as node3, not node2"), std::string::npos)
      << other.message();
  // A name changed on the way no longer matches the proof.
  EXPECT_EQ(run("node2", [](wire::AuthOk& ok) { ok.node = "node2"; }).err(), EACCES);
}

TEST(Auth, WrongClientSecretRefused) {
  SharedSecret good = Secret("the-cluster-secret-1234");
  SharedSecret bad = Secret("not-the-cluster-secret!");
  ClientHandshake client(bad);
  ServerHandshake server(good, "node-b");
  auto auth = client.OnChallenge(server.OnHello(client.Start()).value());
  ASSERT_TRUE(auth.ok());
  auto ok = server.OnAuth(*auth);
  EXPECT_EQ(ok.status().err(), EACCES);
  EXPECT_FALSE(server.authenticated());
}

TEST(Auth, ServerWithWrongSecretIsDetectedByClient) {
  SharedSecret good = Secret("the-cluster-secret-1234");
  SharedSecret bad = Secret("an-impostor-server-5678");
  ClientHandshake client(good);
  ServerHandshake server(bad, "node-b");
  wire::Hello hello = client.Start();
  wire::Challenge challenge = server.OnHello(hello).value();
  ASSERT_TRUE(client.OnChallenge(challenge).ok());
  // The impostor answers with a proof made from its own secret over the real nonces.
  wire::AuthOk forged{ComputeProof(bad, AuthRole::kServer, hello.nonce, challenge.nonce, "node-b"),
                      "node-b"};
  EXPECT_EQ(client.OnAuthOk(forged).err(), EACCES);
}

TEST(Auth, ReflectedClientProofIsNotAServerProof) {
  SharedSecret secret = Secret("the-cluster-secret-1234");
  ClientHandshake client(secret);
  ServerHandshake server(secret, "node-b");
  auto auth = client.OnChallenge(server.OnHello(client.Start()).value()).value();
  EXPECT_EQ(client.OnAuthOk(wire::AuthOk{auth.proof, "node-b"}).err(), EACCES);
}

TEST(Auth, MissingSecretRefused) {
  SharedSecret none;
  ClientHandshake client(none);
  ServerHandshake server(Secret("the-cluster-secret-1234"), "node-b");
  auto challenge = server.OnHello(client.Start()).value();
  EXPECT_EQ(client.OnChallenge(challenge).status().err(), EACCES);
  // A client that sends an all-zero proof (no secret) is refused by the server.
  EXPECT_EQ(server.OnAuth(wire::Auth{}).status().err(), EACCES);
}

TEST(Auth, OutOfOrderStepsRefused) {
  SharedSecret secret = Secret("the-cluster-secret-1234");
  ServerHandshake server(secret, "node-b");
  EXPECT_EQ(server.OnAuth(wire::Auth{}).status().err(), EPROTO);  // AUTH before HELLO
  ServerHandshake server2(secret, "node-b");
  ASSERT_TRUE(server2.OnHello(wire::Hello{}).ok());
  EXPECT_EQ(server2.OnHello(wire::Hello{}).status().err(), EPROTO);  // HELLO twice
  ClientHandshake client(secret);
  EXPECT_EQ(client.OnChallenge(wire::Challenge{}).status().err(), EPROTO);
}

TEST(Auth, NoncesAreFresh) {
  EXPECT_NE(RandomNonce(), RandomNonce());
  SharedSecret secret = Secret("the-cluster-secret-1234");
  wire::Nonce a = RandomNonce(), b = RandomNonce();
  EXPECT_NE(ComputeProof(secret, AuthRole::kClient, a, b),
            ComputeProof(secret, AuthRole::kClient, b, a));
  EXPECT_TRUE(ProofMatches(ComputeProof(secret, AuthRole::kClient, a, b),
                           ComputeProof(secret, AuthRole::kClient, a, b)));
}

TEST(SharedSecretFile, ReadsAndStripsNewline) {
  char path[] = "/tmp/kvfs-secret-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  { std::ofstream(path) << "0123456789abcdef-secret\n"; }
  auto s = SharedSecret::FromFile(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->bytes(), "0123456789abcdef-secret");
  { std::ofstream(path) << "short\n"; }
  EXPECT_EQ(SharedSecret::FromFile(path).status().err(), EINVAL);
  { std::ofstream(path) << std::string(100 << 10, 'k'); }  // no secret is 100 KiB
  EXPECT_EQ(SharedSecret::FromFile(path).status().err(), EINVAL);
  ::unlink(path);
  EXPECT_EQ(SharedSecret::FromFile(path).status().err(), ENOENT);
  // Not files: /dev/zero never ended (the start hung, growing), a FIFO blocked it.
  EXPECT_EQ(SharedSecret::FromFile("/dev/zero").status().err(), EINVAL);
  EXPECT_EQ(SharedSecret::FromFile("/tmp").status().err(), EINVAL);
  ASSERT_EQ(::mkfifo(path, 0600), 0);
  auto fifo = SharedSecret::FromFile(path);
  EXPECT_EQ(fifo.status().err(), EINVAL);
  EXPECT_NE(fifo.status().message().find("not a regular file"), std::string::npos);
  ::unlink(path);
}

}  // namespace
}  // namespace kvfs
