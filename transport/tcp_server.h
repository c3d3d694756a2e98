// PeerServer over TCP. One poller thread accepts connections and watches the idle ones; when a
// connection becomes readable it is handed to one of `threads` workers, which reads one frame,
// runs the handshake step or the RequestHandler call, writes the answer and hands the
// connection back. Many idle peer connections thus cost no thread each, and one slow handler
// call blocks only its own connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "auth.h"
#include "kvfs/log_limiter.h"
#include "kvfs/transport.h"
#include "remote_read_exporter.h"
#include "tcp_frame_io.h"

namespace kvfs {

class TcpPeerServer : public PeerServer {
 public:
  // GETs that ask for RDMA data are served by the exporter; without one they get EOPNOTSUPP
  // and the client falls back to inline data.
  static Result<std::unique_ptr<TcpPeerServer>> Start(const ServerOptions& options,
                                                      RequestHandler* handler);
  // Attaches the RDMA exporter (it must outlive the server).
  void SetExporter(RemoteReadExporter* exporter) { exporter_.store(exporter); }
  ~TcpPeerServer() override;
  uint16_t port() const override { return port_; }
  void Stop() override;

 private:
  struct Conn {
    Fd fd;
    std::unique_ptr<ServerHandshake> handshake;
    Deadline auth_deadline;
    std::string peer;
    // Before authentication the poller reads frames here without blocking, and a worker gets
    // the connection only with a whole frame: a client that sends half a frame and stops
    // (or many of them) holds no worker, so it cannot starve the real peers.
    std::string inbox;
  };
  enum class Inbox { kPartial, kFrame, kClose };
  // A worker's reusable buffer for GET answers and PUT data, mapped again only when a request
  // outgrows it (no page zeroing on each large request), in transparent huge pages
  // (kvfs/huge_pages.h): the engine reads a GET's segments into it with O_DIRECT, each one
  // physical segment for the block layer (no copy out of its ring's buffers).
  struct Scratch {
    uint8_t* bytes = nullptr;
    size_t capacity = 0;
    Scratch() = default;
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch();
    std::span<uint8_t> Get(size_t n);  // empty when n bytes cannot be had
  };
  struct Answer {
    wire::MsgType type;
    uint32_t flags = wire::kFlagResponse;
    std::string meta;
    std::span<const uint8_t> data;
  };

  TcpPeerServer(const ServerOptions& options, RequestHandler* handler);
  void PollLoop();
  void WorkerLoop();
  // Reads what an unauthenticated connection sent, never past the end of one frame.
  Inbox FillInbox(Conn& conn);
  bool ServeOne(Conn& conn, Scratch& scratch);
  bool Handshake(Conn& conn, const ReceivedFrame& frame);
  // Fills *answer, or returns the error to send; *fatal says the frame itself was malformed.
  Status Dispatch(const ReceivedFrame& frame, std::span<const uint8_t> data, Scratch& scratch,
                  Answer* answer, bool* fatal);
  void SendError(Conn& conn, uint64_t request_id, const Status& st);
  void Wake();

  const ServerOptions options_;
  RequestHandler* const handler_;
  std::atomic<RemoteReadExporter*> exporter_{nullptr};
  Fd listen_;
  Fd wake_;
  uint16_t port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::unique_ptr<Conn>> ready_;      // readable, waiting for a worker
  std::vector<std::unique_ptr<Conn>> returned_;  // served, back to the poller
  std::set<Conn*> busy_;                         // being served (shut down on Stop)
  std::vector<std::unique_ptr<Conn>> idle_;      // owned by the poller thread
  std::atomic<size_t> connections_{0};
  // Warnings about connections not authenticated yet: anyone can cause them.
  LogLimiter stranger_log_{10, std::chrono::seconds(10)};

  std::thread poller_;
  std::vector<std::thread> workers_;
  std::once_flag stop_once_;
};

}  // namespace kvfs
