// The life of one RDMA connection as a pure state machine, driven by rdma_cm events (and local
// timeouts and closes). Kept apart from the verbs calls so every transition, including the error
// paths a real device rarely shows, is unit-tested without hardware.
//
//   client: Idle -Start-> ResolvingAddr -AddrResolved-> ResolvingRoute -RouteResolved->
//           Connecting -Established-> Connected -Close-> Disconnecting -Disconnected-> Closed
//   server: Idle -ConnectRequest-> Connecting -Established-> Connected ...
//   any failure event (address/route error, reject, unreachable, timeout, device removal) ->
//   Failed, with the errno a caller should see.
#pragma once

#include <optional>
#include <string_view>

#include "kvfs/status.h"

namespace kvfs {

enum class RdmaState {
  kIdle,
  kResolvingAddr,
  kResolvingRoute,
  kConnecting,
  kConnected,
  kDisconnecting,
  kClosed,
  kFailed,
};

enum class RdmaEvent {
  kStart,           // client: rdma_resolve_addr issued
  kAddrResolved,    // RDMA_CM_EVENT_ADDR_RESOLVED
  kAddrError,       // RDMA_CM_EVENT_ADDR_ERROR
  kRouteResolved,   // RDMA_CM_EVENT_ROUTE_RESOLVED
  kRouteError,      // RDMA_CM_EVENT_ROUTE_ERROR
  kConnectRequest,  // server: RDMA_CM_EVENT_CONNECT_REQUEST on a new id
  kEstablished,     // RDMA_CM_EVENT_ESTABLISHED
  kRejected,        // RDMA_CM_EVENT_REJECTED
  kUnreachable,     // RDMA_CM_EVENT_UNREACHABLE
  kConnectError,    // RDMA_CM_EVENT_CONNECT_ERROR
  kDisconnected,    // RDMA_CM_EVENT_DISCONNECTED / TIMEWAIT_EXIT
  kDeviceRemoval,   // RDMA_CM_EVENT_DEVICE_REMOVAL
  kTimeout,         // local: the step's deadline passed
  kClose,           // local: the owner closes the connection
};

std::string_view RdmaStateName(RdmaState s);
std::string_view RdmaEventName(RdmaEvent e);
// The rdma_cm event type (enum rdma_cm_event_type) as an RdmaEvent; nullopt for events the
// connection does not act on.
std::optional<RdmaEvent> RdmaEventFromCm(int cm_event_type);

class RdmaConnectionState {
 public:
  RdmaState state() const { return state_; }
  bool connected() const { return state_ == RdmaState::kConnected; }
  bool terminal() const { return state_ == RdmaState::kClosed || state_ == RdmaState::kFailed; }
  // Applies `event`. Ok for an expected transition; for a failure event the state becomes
  // kFailed and the Status carries the errno for the caller (ECONNREFUSED, ETIMEDOUT, ...); an
  // event that makes no sense in the current state is EPROTO and also fails the connection.
  Status On(RdmaEvent event);

 private:
  RdmaState state_ = RdmaState::kIdle;
};

}  // namespace kvfs
