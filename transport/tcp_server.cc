#include "tcp_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include <exception>

#include "kvfs/huge_pages.h"

namespace kvfs {

using wire::MsgType;

namespace {

constexpr uint32_t kHandshakeCap = 8192;  // frames before authentication are tiny
constexpr uint32_t kFrameSlack = 4096;    // room for a GET answer's meta inside the frame cap

std::string PeerName(int fd) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<struct sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Handler code is not ours: an exception must become an error value here, at the boundary of
// the worker thread, never unwind through it.
template <typename Fn>
auto Guard(Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Status::IoError(std::string("request handler threw: ") + e.what());
  } catch (...) {
    return Status::IoError("request handler threw");
  }
}

template <typename T>
Status DecodeMeta(const ReceivedFrame& f, T* out) {
  return wire::Decode(wire::AsBytes(f.meta), out);
}

}  // namespace

TcpPeerServer::Scratch::~Scratch() { UnmapHugePages(bytes, capacity); }

std::span<uint8_t> TcpPeerServer::Scratch::Get(size_t n) {
  if (n > capacity) {
    UnmapHugePages(bytes, capacity);
    const size_t rounded = RoundUpToHugePage(n);
    bytes = MapHugePages(rounded);
    capacity = bytes ? rounded : 0;
    if (!bytes) return {};
  }
  return {bytes, n};
}

Result<std::unique_ptr<TcpPeerServer>> TcpPeerServer::Start(const ServerOptions& options,
                                                            RequestHandler* handler) {
  if (options.secret.empty()) return Status::Invalid("peer server needs a shared secret");
  if (handler == nullptr) return Status::Invalid("peer server needs a request handler");
  if (options.max_frame < 2 * kFrameSlack) return Status::Invalid("max_frame too small");
  std::unique_ptr<TcpPeerServer> s(new TcpPeerServer(options, handler));
  KVFS_ASSIGN_OR_RETURN(s->listen_, TcpListen(options.host, options.port, 512));
  KVFS_ASSIGN_OR_RETURN(s->port_, LocalPort(s->listen_.get()));
  s->wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!s->wake_.valid()) return Status::Error(errno, "eventfd");
  s->poller_ = std::thread([p = s.get()] { p->PollLoop(); });
  for (size_t i = 0; i < std::max<size_t>(1, options.threads); ++i) {
    s->workers_.emplace_back([p = s.get()] { p->WorkerLoop(); });
  }
  spdlog::info("peer server listening on {}:{} ({} threads)", options.host, s->port_,
               s->workers_.size());
  return s;
}

TcpPeerServer::TcpPeerServer(const ServerOptions& options, RequestHandler* handler)
    : options_(options), handler_(handler) {}

TcpPeerServer::~TcpPeerServer() { Stop(); }

void TcpPeerServer::Stop() {
  std::call_once(stop_once_, [this] {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      // Unblock workers waiting on a slow peer now rather than after io_timeout.
      for (Conn* c : busy_) ::shutdown(c->fd.get(), SHUT_RDWR);
    }
    cv_.notify_all();
    Wake();
    if (poller_.joinable()) poller_.join();
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
    ready_.clear();
    returned_.clear();
    idle_.clear();
    listen_.Reset();
  });
}

void TcpPeerServer::Wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void TcpPeerServer::PollLoop() {
  std::vector<struct pollfd> fds;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (auto& c : returned_) idle_.push_back(std::move(c));
      returned_.clear();
    }
    fds.clear();
    fds.push_back({listen_.get(), POLLIN, 0});
    fds.push_back({wake_.get(), POLLIN, 0});
    for (auto& c : idle_) fds.push_back({c->fd.get(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR) {
      spdlog::error("peer server poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_.get(), &v, sizeof v);
    }
    // Readable idle connections go to the workers (before accepting changes idle_).
    std::vector<std::unique_ptr<Conn>> still_idle;
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < idle_.size(); ++i) {
      auto& c = idle_[i];
      const Inbox in = fds[i + 2].revents == 0         ? Inbox::kPartial
                       : c->handshake->authenticated() ? Inbox::kFrame
                                                       : FillInbox(*c);
      if (in == Inbox::kFrame) {
        std::lock_guard lock(mu_);
        ready_.push_back(std::move(c));
        cv_.notify_one();
      } else if (in == Inbox::kClose) {
        connections_.fetch_sub(1);
      } else if (!c->handshake->authenticated() && now > c->auth_deadline) {
        if (std::string note; stranger_log_.Allow(&note))
          spdlog::warn("peer {}: no authentication within {} ms, closing{}", c->peer,
                       options_.auth_timeout.count(), note);
        connections_.fetch_sub(1);
      } else {
        still_idle.push_back(std::move(c));
      }
    }
    idle_ = std::move(still_idle);
    if (fds[0].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        auto c = std::make_unique<Conn>();
        c->fd = Fd(fd);
        c->peer = PeerName(fd);
        if (connections_.load() >= options_.max_connections) {
          if (std::string note; stranger_log_.Allow(&note))
            spdlog::warn("peer {}: refused, {} connections open{}", c->peer, connections_.load(),
                         note);
          continue;
        }
        TuneSocket(fd, options_.socket_buffer_bytes);
        c->handshake = std::make_unique<ServerHandshake>(options_.secret, options_.node_name);
        c->auth_deadline = Clock::now() + options_.auth_timeout;
        connections_.fetch_add(1);
        spdlog::debug("peer {}: connected", c->peer);
        idle_.push_back(std::move(c));
      }
    }
  }
}

void TcpPeerServer::WorkerLoop() {
  Scratch scratch;
  for (;;) {
    std::unique_ptr<Conn> conn;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      conn = std::move(ready_.front());
      ready_.pop_front();
      busy_.insert(conn.get());
    }
    const bool keep = ServeOne(*conn, scratch);
    {
      std::lock_guard lock(mu_);
      busy_.erase(conn.get());
      if (keep && !stopping_) {
        returned_.push_back(std::move(conn));
      }
    }
    if (conn) {
      connections_.fetch_sub(1);
      conn.reset();
    } else {
      Wake();
    }
  }
}

void TcpPeerServer::SendError(Conn& conn, uint64_t request_id, const Status& st) {
  wire::ErrorReply err{st.err(), st.message()};
  // Best effort with a short deadline: the peer may be the reason we are failing.
  Status s = SendFrame(conn.fd.get(), MsgType::kError, wire::kFlagResponse, request_id,
                       wire::Encode(err), {}, Clock::now() + std::chrono::milliseconds(200));
  if (!s.ok()) spdlog::debug("peer {}: could not send ERROR: {}", conn.peer, s.ToString());
}

TcpPeerServer::Inbox TcpPeerServer::FillInbox(Conn& conn) {
  for (;;) {
    size_t want = wire::kHeaderSize - std::min(conn.inbox.size(), wire::kHeaderSize);
    if (want == 0) {
      wire::FrameHeader h;
      Status st = wire::DecodeHeader(wire::AsBytes(conn.inbox), kHandshakeCap, &h);
      if (!st.ok()) {
        if (std::string note; stranger_log_.Allow(&note))
          spdlog::warn("peer {}: bad frame before authentication, closing: {}{}", conn.peer,
                       st.ToString(), note);
        return Inbox::kClose;
      }
      want = wire::kHeaderSize + h.payload_len - conn.inbox.size();
      if (want == 0) return Inbox::kFrame;
    }
    char buf[kHandshakeCap];
    const ssize_t n =
        ::recv(conn.fd.get(), buf, std::min(want, sizeof buf), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      conn.inbox.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return Inbox::kPartial;
    spdlog::debug("peer {}: closed before authentication", conn.peer);
    return Inbox::kClose;
  }
}

bool TcpPeerServer::ServeOne(Conn& conn, Scratch& scratch) {
  const bool authed = conn.handshake->authenticated();
  const Deadline deadline = Clock::now() + options_.io_timeout;
  std::span<uint8_t> data;
  auto sink = [&](const ReceivedFrame& f) -> Result<std::span<uint8_t>> {
    if (!authed) return Status::Error(EACCES, "data before authentication");
    if (f.data_len > options_.max_frame) return Status::Error(EMSGSIZE, "data over the cap");
    data = scratch.Get(f.data_len);
    if (data.size() != f.data_len) return Status::Error(ENOMEM, "no memory for the data");
    return data;
  };
  ReceivedFrame frame;
  Status st;
  if (authed) {
    // A PUT's data CRC is computed while it streams in when the client sent one (the flag is
    // in the header, read before the data), so checking it costs no second pass.
    st = RecvFrame(conn.fd.get(), options_.max_frame, deadline, /*eof_ok=*/true, sink, &frame,
                   /*crc_data=*/true);
  } else {
    // The poller read one whole frame (FillInbox).
    wire::FrameView view;
    st = wire::DecodeFrame(wire::AsBytes(conn.inbox), kHandshakeCap, &view);
    if (st.ok()) {
      frame.header = view.header;
      frame.meta.assign(reinterpret_cast<const char*>(view.meta.data()), view.meta.size());
      if (!view.data.empty()) st = Status::Error(EACCES, "data before authentication");
    }
    conn.inbox.clear();
  }
  if (!st.ok()) {
    if (st.err() == ENODATA) {
      spdlog::debug("peer {}: closed", conn.peer);
    } else {
      if (std::string note; authed || stranger_log_.Allow(&note))
        spdlog::warn("peer {}: bad or incomplete frame, closing: {}{}", conn.peer, st.ToString(),
                     note);
      if (st.err() == EPROTO || st.err() == EMSGSIZE || st.err() == EACCES) {
        SendError(conn, frame.header.request_id, st);
      }
    }
    return false;
  }
  if (frame.header.flags & wire::kFlagResponse) {
    if (std::string note; authed || stranger_log_.Allow(&note))
      spdlog::warn("peer {}: sent a response frame as a request, closing{}", conn.peer, note);
    SendError(conn, frame.header.request_id, Status::Error(EPROTO, "unexpected response frame"));
    return false;
  }
  if (!authed) return Handshake(conn, frame);

  Answer answer;
  bool fatal = false;
  st = Dispatch(frame, data, scratch, &answer, &fatal);
  if (!st.ok()) {
    if (fatal) spdlog::warn("peer {}: {}, closing", conn.peer, st.ToString());
    SendError(conn, frame.header.request_id, st);
    return !fatal;
  }
  st = SendFrame(conn.fd.get(), answer.type, answer.flags, frame.header.request_id, answer.meta,
                 answer.data, Clock::now() + options_.io_timeout);
  if (!st.ok()) {
    spdlog::warn("peer {}: cannot send answer, closing: {}", conn.peer, st.ToString());
    return false;
  }
  return true;
}

bool TcpPeerServer::Handshake(Conn& conn, const ReceivedFrame& frame) {
  const Deadline deadline = Clock::now() + options_.io_timeout;
  Status st;
  if (frame.header.type == MsgType::kHello) {
    wire::Hello hello;
    st = DecodeMeta(frame, &hello);
    if (st.ok()) {
      auto challenge = conn.handshake->OnHello(hello);
      st = challenge.ok()
               ? SendFrame(conn.fd.get(), MsgType::kChallenge, wire::kFlagResponse,
                           frame.header.request_id, wire::Encode(*challenge), {}, deadline)
               : challenge.status();
    }
  } else if (frame.header.type == MsgType::kAuth) {
    wire::Auth auth;
    st = DecodeMeta(frame, &auth);
    if (st.ok()) {
      auto ok = conn.handshake->OnAuth(auth);
      if (ok.ok()) {
        st = SendFrame(conn.fd.get(), MsgType::kAuthOk, wire::kFlagResponse,
                       frame.header.request_id, wire::Encode(*ok), {}, deadline);
        if (st.ok()) {
          spdlog::debug("peer {} ({}): authenticated", conn.peer, conn.handshake->peer_node());
        }
      } else {
        st = ok.status();
      }
    }
  } else {
    st = Status::Error(
        EACCES, std::string(wire::MsgTypeName(frame.header.type)) + " before authentication");
  }
  if (!st.ok()) {
    if (std::string note; stranger_log_.Allow(&note))
      spdlog::warn("peer {}: handshake refused, closing: {}{}", conn.peer, st.ToString(), note);
    SendError(conn, frame.header.request_id, st);
    return false;
  }
  return true;
}

// The digests a GET answer carries: the handler's when they cover its bytes exactly, one
// computed here when it gave none.
static Result<wire::GetReply> SealDigests(wire::GetReply reply, std::span<const uint8_t> out,
                                          std::vector<DataDigest> digests) {
  if (digests.empty() && reply.length > 0) {
    digests.push_back({static_cast<uint32_t>(reply.length), XXH3_64bits(out.data(), reply.length)});
  }
  uint64_t covered = 0;
  for (const DataDigest& d : digests) {
    if (d.length == 0) return Status::IoError("handler returned an empty digest span");
    covered += d.length;
  }
  if (covered != reply.length || digests.size() > wire::kMaxDigests) {
    return Status::IoError("handler's digests do not cover its bytes");
  }
  reply.digests = std::move(digests);
  return reply;
}

Status TcpPeerServer::Dispatch(const ReceivedFrame& frame, std::span<const uint8_t> data,
                               Scratch& scratch, Answer* answer, bool* fatal) {
  answer->type = frame.header.type;
  // A meta that does not decode means the peer does not speak our protocol: close.
  auto decode = [&](auto* msg) {
    Status st = DecodeMeta(frame, msg);
    if (!st.ok()) *fatal = true;
    return st;
  };
  switch (frame.header.type) {
    case MsgType::kPing: {
      wire::Ping req;
      KVFS_RETURN_IF_ERROR(decode(&req));
      answer->meta = wire::Encode(wire::Pong{});
      return Status::Ok();
    }
    case MsgType::kGet: {
      wire::GetRequest req;
      KVFS_RETURN_IF_ERROR(decode(&req));
      const uint64_t room = options_.max_frame - kFrameSlack;
      if (req.length > room) {
        return Status::Invalid("GET of " + std::to_string(req.length) + " bytes exceeds one frame");
      }
      std::span<uint8_t> out;
      std::optional<ExportedBuffer> exported;
      RemoteReadExporter* const exporter = exporter_.load();
      if (frame.header.flags & wire::kFlagRdmaData) {
        if (exporter == nullptr) return Status::Error(EOPNOTSUPP, "no RDMA on this server");
        auto e = exporter->Acquire(req.length);
        if (!e.ok()) return e.status();
        exported = *e;
        out = exported->bytes.subspan(0, req.length);
      } else {
        out = scratch.Get(req.length);
        if (out.size() != req.length) return Status::Error(ENOMEM, "no memory for the answer");
      }
      const bool want_digests = frame.header.flags & wire::kFlagDataDigests;
      std::vector<DataDigest> digests;
      auto r = Guard([&] { return handler_->Get(req, out, want_digests ? &digests : nullptr); });
      if (r.ok() && r->length > out.size()) r = Status::IoError("handler returned too many bytes");
      if (r.ok() && want_digests) r = SealDigests(*r, out, std::move(digests));
      if (!r.ok()) {
        if (exported) exporter->Release(exported->remote.token);
        return r.status();
      }
      wire::GetReply reply = *r;
      reply.remote.reset();
      if (want_digests) answer->flags |= wire::kFlagDataDigests;
      if (frame.header.flags & wire::kFlagDataCrc) {
        reply.data_crc = wire::Crc32c(out.data(), reply.length);
        answer->flags |= wire::kFlagDataCrc;
      }
      if (exported) {
        reply.remote = exported->remote;
        reply.remote->length = reply.length;
        answer->flags |= wire::kFlagRdmaData;
      } else {
        answer->data = out.subspan(0, reply.length);
      }
      answer->meta = wire::Encode(reply);
      return Status::Ok();
    }
    case MsgType::kPut: {
      wire::PutRequest req;
      KVFS_RETURN_IF_ERROR(decode(&req));
      if (req.length != data.size()) {
        *fatal = true;
        return Status::Error(EPROTO, "PUT length does not match its data");
      }
      if ((frame.header.flags & wire::kFlagDataCrc) && frame.data_crc != req.data_crc) {
        spdlog::error("PUT {}: data checksum mismatch, refused", req.key);
        return Status::IoError("PUT data checksum mismatch");
      }
      auto r = Guard([&] { return handler_->Put(req, data); });
      if (!r.ok()) return r.status();
      answer->meta = wire::Encode(*r);
      return Status::Ok();
    }
    case MsgType::kStats: {
      wire::StatsRequest req;
      KVFS_RETURN_IF_ERROR(decode(&req));
      auto r = Guard([&] { return handler_->Stats(); });
      if (!r.ok()) return r.status();
      answer->meta = wire::Encode(*r);
      return Status::Ok();
    }
    case MsgType::kRdmaRelease: {
      wire::RdmaRelease req;
      KVFS_RETURN_IF_ERROR(decode(&req));
      if (RemoteReadExporter* exporter = exporter_.load()) exporter->Release(req.token);
      answer->meta = wire::Encode(req);
      return Status::Ok();
    }
    case MsgType::kHello:
    case MsgType::kAuth:
    case MsgType::kChallenge:
    case MsgType::kAuthOk:
    case MsgType::kError:
      break;
  }
  *fatal = true;
  return Status::Error(EPROTO, std::string("unexpected ") +
                                   std::string(wire::MsgTypeName(frame.header.type)) + " request");
}

}  // namespace kvfs
