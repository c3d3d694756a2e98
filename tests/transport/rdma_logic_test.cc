// RDMA logic that needs no device: the connection state machine, the registration cache and the
// server's export pool (with a fake registrar), and the grant/release control messages.
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <set>
#include <thread>

#include "kvfs/wire.h"
#include "rdma_buffer_exporter.h"
#include "rdma_connection_state.h"
#include "rdma_registration.h"

namespace kvfs {
namespace {

using E = RdmaEvent;
using S = RdmaState;

// ---- state machine ----

TEST(RdmaConnectionState, ClientHappyPathAndClose) {
  RdmaConnectionState st;
  EXPECT_EQ(st.state(), S::kIdle);
  for (E e : {E::kStart, E::kAddrResolved, E::kRouteResolved, E::kEstablished}) {
    ASSERT_TRUE(st.On(e).ok()) << RdmaEventName(e);
  }
  EXPECT_TRUE(st.connected());
  ASSERT_TRUE(st.On(E::kClose).ok());
  EXPECT_EQ(st.state(), S::kDisconnecting);
  ASSERT_TRUE(st.On(E::kDisconnected).ok());
  EXPECT_EQ(st.state(), S::kClosed);
  EXPECT_TRUE(st.On(E::kClose).ok());         // closing twice is harmless
  EXPECT_TRUE(st.On(E::kDisconnected).ok());  // so is a late TIMEWAIT_EXIT
}

TEST(RdmaConnectionState, ServerPathAndPeerDisconnect) {
  RdmaConnectionState st;
  ASSERT_TRUE(st.On(E::kConnectRequest).ok());
  EXPECT_EQ(st.state(), S::kConnecting);
  ASSERT_TRUE(st.On(E::kEstablished).ok());
  ASSERT_TRUE(st.On(E::kDisconnected).ok());
  EXPECT_EQ(st.state(), S::kClosed);
}

TEST(RdmaConnectionState, FailureEventsGiveTheirErrno) {
  struct Case {
    std::vector<E> before;
    E failure;
    int err;
  };
  const std::vector<Case> cases = {
      {{E::kStart}, E::kAddrError, EHOSTUNREACH},
      {{E::kStart, E::kAddrResolved}, E::kRouteError, ENETUNREACH},
      {{E::kStart, E::kAddrResolved, E::kRouteResolved}, E::kRejected, ECONNREFUSED},
      {{E::kStart, E::kAddrResolved, E::kRouteResolved}, E::kUnreachable, EHOSTUNREACH},
      {{E::kStart, E::kAddrResolved, E::kRouteResolved}, E::kConnectError, ECONNABORTED},
      {{E::kStart}, E::kTimeout, ETIMEDOUT},
      {{E::kStart, E::kAddrResolved, E::kRouteResolved, E::kEstablished},
       E::kDeviceRemoval,
       ENODEV},
      {{E::kStart, E::kAddrResolved, E::kRouteResolved, E::kEstablished}, E::kTimeout, ETIMEDOUT},
  };
  for (const Case& c : cases) {
    RdmaConnectionState st;
    for (E e : c.before) ASSERT_TRUE(st.On(e).ok());
    Status s = st.On(c.failure);
    EXPECT_EQ(s.err(), c.err) << RdmaEventName(c.failure);
    EXPECT_EQ(st.state(), S::kFailed);
    // Nothing but a close is accepted after a failure.
    EXPECT_EQ(st.On(E::kEstablished).err(), EPROTO);
    EXPECT_TRUE(st.On(E::kClose).ok());
  }
}

TEST(RdmaConnectionState, OutOfOrderEventsFail) {
  {
    RdmaConnectionState st;
    EXPECT_EQ(st.On(E::kEstablished).err(), EPROTO);  // established before connecting
    EXPECT_EQ(st.state(), S::kFailed);
  }
  {
    RdmaConnectionState st;
    ASSERT_TRUE(st.On(E::kStart).ok());
    EXPECT_EQ(st.On(E::kRouteResolved).err(), EPROTO);  // route before address
  }
  {
    RdmaConnectionState st;
    ASSERT_TRUE(st.On(E::kStart).ok());
    EXPECT_EQ(st.On(E::kConnectRequest).err(), EPROTO);  // a client id never gets requests
  }
  {
    RdmaConnectionState st;
    EXPECT_EQ(st.On(E::kDisconnected).err(), EPROTO);
  }
}

TEST(RdmaConnectionState, MapsCmEvents) {
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_ADDR_RESOLVED), E::kAddrResolved);
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_ROUTE_ERROR), E::kRouteError);
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_ESTABLISHED), E::kEstablished);
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_REJECTED), E::kRejected);
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_TIMEWAIT_EXIT), E::kDisconnected);
  EXPECT_EQ(RdmaEventFromCm(RDMA_CM_EVENT_DEVICE_REMOVAL), E::kDeviceRemoval);
  EXPECT_FALSE(RdmaEventFromCm(RDMA_CM_EVENT_MULTICAST_JOIN).has_value());
}

// ---- registration cache ----

class FakeRegistrar : public MemoryRegistrar {
 public:
  Result<MemoryRegion> Register(void* addr, size_t length) override {
    if (fail_next) {
      fail_next = false;
      return Status::Error(ENOMEM, "fake registration failure");
    }
    MemoryRegion r;
    r.addr = reinterpret_cast<uint64_t>(addr);
    r.length = length;
    r.lkey = next_key;
    r.rkey = next_key + 1000;
    ++next_key;
    r.handle = reinterpret_cast<void*>(static_cast<uintptr_t>(r.lkey));
    live.insert(r.lkey);
    ++registrations;
    return r;
  }
  void Deregister(const MemoryRegion& r) override {
    EXPECT_EQ(live.erase(r.lkey), 1u) << "double or unknown deregistration";
    ++deregistrations;
  }
  std::set<uint32_t> live;
  uint32_t next_key = 1;
  int registrations = 0, deregistrations = 0;
  bool fail_next = false;
};

TEST(RegistrationCache, HitsForContainedRangesMissesOtherwise) {
  FakeRegistrar reg;
  std::vector<uint8_t> buf(1 << 20);
  RegistrationCache cache(&reg, 64 << 20);
  auto a = cache.Pin(buf.data(), buf.size());
  ASSERT_TRUE(a.ok());
  cache.Unpin(*a);
  auto b = cache.Pin(buf.data() + 4096, 8192);  // inside: same registration
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->lkey, a->lkey);
  cache.Unpin(*b);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(reg.registrations, 1);
  std::vector<uint8_t> other(4096);
  auto c = cache.Pin(other.data(), other.size());
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->lkey, a->lkey);
  cache.Unpin(*c);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.registered_bytes(), buf.size() + other.size());
}

TEST(RegistrationCache, EvictsLeastRecentlyUsedUnpinnedUnderBudget) {
  FakeRegistrar reg;
  std::vector<uint8_t> a(1 << 20), b(1 << 20), c(1 << 20);
  RegistrationCache cache(&reg, 2 << 20);
  auto ra = cache.Pin(a.data(), a.size()).value();
  auto rb = cache.Pin(b.data(), b.size()).value();
  cache.Unpin(rb);
  cache.Unpin(ra);  // a used after b? No: last_use is set at Pin; b is newer than a.
  auto rc = cache.Pin(c.data(), c.size());
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(reg.deregistrations, 1);
  EXPECT_EQ(reg.live.count(ra.lkey), 0u);  // a was least recently used
  EXPECT_EQ(reg.live.count(rb.lkey), 1u);
}

TEST(RegistrationCache, PinnedRegionsAreNeverEvicted) {
  FakeRegistrar reg;
  std::vector<uint8_t> a(1 << 20), b(1 << 20);
  RegistrationCache cache(&reg, 1 << 20);
  auto ra = cache.Pin(a.data(), a.size()).value();
  auto rb = cache.Pin(b.data(), b.size());
  EXPECT_EQ(rb.status().err(), ENOMEM);
  EXPECT_EQ(reg.live.count(ra.lkey), 1u);
  cache.Unpin(ra);
  EXPECT_TRUE(cache.Pin(b.data(), b.size()).ok());
}

TEST(RegistrationCache, InvalidateDropsOverlappingUnlessPinned) {
  FakeRegistrar reg;
  std::vector<uint8_t> buf(1 << 20);
  RegistrationCache cache(&reg, 64 << 20);
  auto r = cache.Pin(buf.data(), buf.size()).value();
  EXPECT_EQ(cache.Invalidate(buf.data() + 100, 10).err(), EBUSY);
  EXPECT_EQ(cache.entries(), 1u);
  cache.Unpin(r);
  EXPECT_TRUE(cache.Invalidate(buf.data() + 100, 10).ok());
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.registered_bytes(), 0u);
  EXPECT_TRUE(reg.live.empty());
}

TEST(RegistrationCache, RegistrarFailureAndBadRangesAreErrors) {
  FakeRegistrar reg;
  std::vector<uint8_t> buf(4096);
  RegistrationCache cache(&reg, 1 << 20);
  reg.fail_next = true;
  EXPECT_EQ(cache.Pin(buf.data(), buf.size()).status().err(), ENOMEM);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.Pin(nullptr, 10).status().err(), EINVAL);
  EXPECT_EQ(cache.Pin(buf.data(), 0).status().err(), EINVAL);
}

TEST(RegistrationCache, DestructorDeregistersEverything) {
  FakeRegistrar reg;
  std::vector<uint8_t> a(4096), b(4096);
  {
    RegistrationCache cache(&reg, 1 << 20);
    cache.Unpin(cache.Pin(a.data(), a.size()).value());
    cache.Unpin(cache.Pin(b.data(), b.size()).value());
  }
  EXPECT_TRUE(reg.live.empty());
  EXPECT_EQ(reg.deregistrations, 2);
}

// ---- export pool ----

TEST(RdmaBufferExporter, GrantReleaseReuse) {
  FakeRegistrar reg;
  RdmaBufferExporter ex(&reg, 8 << 20);
  auto g1 = ex.Acquire(3 << 20);
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(g1->bytes.size(), 3u << 20);
  EXPECT_EQ(g1->remote.addr, reinterpret_cast<uint64_t>(g1->bytes.data()));
  EXPECT_EQ(g1->remote.length, 3u << 20);
  EXPECT_GE(g1->remote.rkey, 1000u);  // the registrar's rkey, not the lkey
  EXPECT_EQ(ex.outstanding(), 1u);
  auto g2 = ex.Acquire(1 << 20);
  ASSERT_TRUE(g2.ok());
  EXPECT_NE(g1->remote.token, g2->remote.token);
  ex.Release(g1->remote.token);
  ex.Release(g1->remote.token);  // twice: ignored
  ex.Release(12345);             // unknown: ignored
  EXPECT_EQ(ex.outstanding(), 1u);
  EXPECT_EQ(ex.pooled(), 1u);
  auto g3 = ex.Acquire(2 << 20);  // fits the pooled 3 MiB buffer
  ASSERT_TRUE(g3.ok());
  EXPECT_EQ(g3->bytes.data(), g1->bytes.data());
  EXPECT_EQ(reg.registrations, 2);  // reused, not registered again
  ex.Release(g2->remote.token);
  ex.Release(g3->remote.token);
}

TEST(RdmaBufferExporter, BudgetIsEnforced) {
  FakeRegistrar reg;
  RdmaBufferExporter ex(&reg, 4 << 20);
  auto g1 = ex.Acquire(3 << 20);
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(ex.Acquire(2 << 20).status().err(), ENOMEM);
  ex.Release(g1->remote.token);
  // The pooled 3 MiB buffer is dropped to make room for a bigger one.
  auto g2 = ex.Acquire(4 << 20);
  ASSERT_TRUE(g2.ok());
  EXPECT_LE(ex.allocated_bytes(), 4u << 20);
  ex.Release(g2->remote.token);
}

TEST(RdmaBufferExporter, ExpiredGrantsAreDeregisteredNotReused) {
  FakeRegistrar reg;
  RdmaBufferExporter ex(&reg, 8 << 20, std::chrono::milliseconds(1));
  auto g1 = ex.Acquire(1 << 20);
  ASSERT_TRUE(g1.ok());
  const uint32_t old_key = g1->remote.rkey - 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto g2 = ex.Acquire(1 << 20);  // reclaims the expired grant first
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(ex.outstanding(), 1u);
  EXPECT_EQ(reg.live.count(old_key), 0u);  // its rkey is dead: a late READ cannot succeed
  ex.Release(g1->remote.token);            // too late: ignored
  EXPECT_EQ(ex.pooled(), 0u);
  ex.Release(g2->remote.token);
}

TEST(RdmaBufferExporter, DestructorFreesEverything) {
  FakeRegistrar reg;
  {
    RdmaBufferExporter ex(&reg, 8 << 20);
    auto g1 = ex.Acquire(1 << 20);
    auto g2 = ex.Acquire(1 << 20);
    ASSERT_TRUE(g1.ok() && g2.ok());
    ex.Release(g1->remote.token);
  }
  EXPECT_TRUE(reg.live.empty());
}

// ---- control messages ----

TEST(RdmaControl, GrantAndReleaseFrames) {
  wire::GetReply grant{32 << 20, 4, 32 << 20, 0, wire::RemoteBuffer{77, 0x1000, 0x42, 32 << 20},
                       {}};
  std::string frame = wire::EncodeFrame(
      wire::MsgType::kGet, wire::kFlagResponse | wire::kFlagRdmaData, 9, wire::Encode(grant));
  wire::FrameView v;
  ASSERT_TRUE(wire::DecodeFrame(wire::AsBytes(frame), wire::kDefaultMaxFrame, &v).ok());
  EXPECT_TRUE(v.data.empty());  // no inline data with a grant
  wire::GetReply out;
  ASSERT_TRUE(wire::Decode(v.meta, &out).ok());
  ASSERT_TRUE(out.remote);
  EXPECT_EQ(out.remote->token, 77u);
  EXPECT_EQ(out.remote->rkey, 0x42u);
  // A grant smaller than the length it claims is malformed.
  grant.remote->length = 10;
  EXPECT_EQ(wire::Decode(wire::AsBytes(wire::Encode(grant)), &out).err(), EPROTO);
  // A granted GET answer carrying inline data anyway is malformed.
  const uint8_t junk[4] = {};
  frame = wire::EncodeFrame(wire::MsgType::kGet, wire::kFlagResponse | wire::kFlagRdmaData, 9,
                            wire::Encode(out), junk);
  EXPECT_EQ(wire::DecodeFrame(wire::AsBytes(frame), wire::kDefaultMaxFrame, &v).err(), EPROTO);
  wire::RdmaRelease rel;
  ASSERT_TRUE(wire::Decode(wire::AsBytes(wire::Encode(wire::RdmaRelease{77})), &rel).ok());
  EXPECT_EQ(rel.token, 77u);
}

}  // namespace
}  // namespace kvfs
