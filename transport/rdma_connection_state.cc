#include "rdma_connection_state.h"

#include <rdma/rdma_cma.h>

#include <string>

namespace kvfs {

std::string_view RdmaStateName(RdmaState s) {
  switch (s) {
    case RdmaState::kIdle:
      return "idle";
    case RdmaState::kResolvingAddr:
      return "resolving-addr";
    case RdmaState::kResolvingRoute:
      return "resolving-route";
    case RdmaState::kConnecting:
      return "connecting";
    case RdmaState::kConnected:
      return "connected";
    case RdmaState::kDisconnecting:
      return "disconnecting";
    case RdmaState::kClosed:
      return "closed";
    case RdmaState::kFailed:
      return "failed";
  }
  return "?";
}

std::string_view RdmaEventName(RdmaEvent e) {
  switch (e) {
    case RdmaEvent::kStart:
      return "start";
    case RdmaEvent::kAddrResolved:
      return "addr-resolved";
    case RdmaEvent::kAddrError:
      return "addr-error";
    case RdmaEvent::kRouteResolved:
      return "route-resolved";
    case RdmaEvent::kRouteError:
      return "route-error";
    case RdmaEvent::kConnectRequest:
      return "connect-request";
    case RdmaEvent::kEstablished:
      return "established";
    case RdmaEvent::kRejected:
      return "rejected";
    case RdmaEvent::kUnreachable:
      return "unreachable";
    case RdmaEvent::kConnectError:
      return "connect-error";
    case RdmaEvent::kDisconnected:
      return "disconnected";
    case RdmaEvent::kDeviceRemoval:
      return "device-removal";
    case RdmaEvent::kTimeout:
      return "timeout";
    case RdmaEvent::kClose:
      return "close";
  }
  return "?";
}

std::optional<RdmaEvent> RdmaEventFromCm(int type) {
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return RdmaEvent::kAddrResolved;
    case RDMA_CM_EVENT_ADDR_ERROR:
      return RdmaEvent::kAddrError;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return RdmaEvent::kRouteResolved;
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return RdmaEvent::kRouteError;
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return RdmaEvent::kConnectRequest;
    case RDMA_CM_EVENT_ESTABLISHED:
      return RdmaEvent::kEstablished;
    case RDMA_CM_EVENT_REJECTED:
      return RdmaEvent::kRejected;
    case RDMA_CM_EVENT_UNREACHABLE:
      return RdmaEvent::kUnreachable;
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return RdmaEvent::kConnectError;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return RdmaEvent::kDisconnected;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return RdmaEvent::kDeviceRemoval;
    default:
      return std::nullopt;
  }
}

Status RdmaConnectionState::On(RdmaEvent event) {
  using S = RdmaState;
  using E = RdmaEvent;
  auto fail = [&](int err, const char* why) {
    state_ = S::kFailed;
    return Status::Error(err, std::string("rdma connection: ") + why);
  };
  if (terminal()) {
    // Closing twice, or a late disconnect after close, is harmless.
    if (event == E::kClose || event == E::kDisconnected) return Status::Ok();
    return Status::Error(EPROTO, "rdma connection: " + std::string(RdmaEventName(event)) +
                                     " after " + std::string(RdmaStateName(state_)));
  }
  switch (event) {
    case E::kAddrError:
      return fail(EHOSTUNREACH, "address resolution failed");
    case E::kRouteError:
      return fail(ENETUNREACH, "route resolution failed");
    case E::kRejected:
      return fail(ECONNREFUSED, "rejected by the peer");
    case E::kUnreachable:
      return fail(EHOSTUNREACH, "peer unreachable");
    case E::kConnectError:
      return fail(ECONNABORTED, "connection error");
    case E::kTimeout:
      return fail(ETIMEDOUT, "timed out");
    case E::kDeviceRemoval:
      return fail(ENODEV, "device removed");
    case E::kClose:
      state_ = state_ == S::kConnected ? S::kDisconnecting : S::kClosed;
      return Status::Ok();
    case E::kDisconnected:
      if (state_ == S::kConnected || state_ == S::kDisconnecting) {
        state_ = S::kClosed;
        return Status::Ok();
      }
      break;
    case E::kStart:
      if (state_ == S::kIdle) {
        state_ = S::kResolvingAddr;
        return Status::Ok();
      }
      break;
    case E::kConnectRequest:
      if (state_ == S::kIdle) {
        state_ = S::kConnecting;
        return Status::Ok();
      }
      break;
    case E::kAddrResolved:
      if (state_ == S::kResolvingAddr) {
        state_ = S::kResolvingRoute;
        return Status::Ok();
      }
      break;
    case E::kRouteResolved:
      if (state_ == S::kResolvingRoute) {
        state_ = S::kConnecting;
        return Status::Ok();
      }
      break;
    case E::kEstablished:
      if (state_ == S::kConnecting) {
        state_ = S::kConnected;
        return Status::Ok();
      }
      break;
  }
  const std::string what =
      std::string(RdmaEventName(event)) + " while " + std::string(RdmaStateName(state_));
  state_ = S::kFailed;
  return Status::Error(EPROTO, "rdma connection: unexpected " + what);
}

}  // namespace kvfs
