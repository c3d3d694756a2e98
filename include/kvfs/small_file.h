// A small regular file read whole: a config file, a shared secret. Header-only: every layer
// reads one of them. Not std::ifstream: a device (/dev/zero) never ends and a FIFO blocks
// until someone writes, so an operator's typo could hang or exhaust a starting daemon.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kvfs/status.h"

namespace kvfs {

// The file's bytes. EINVAL for anything but a regular file of at most `max_bytes`; the
// open's errno otherwise. Messages start with `what` and the path.
inline Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                         const std::string& what) {
  const std::string who = what + " " + path + ": ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    return Status::Error(err, who + "cannot read: " + std::strerror(err));
  }
  struct stat st {};
  Status status;
  std::string bytes;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    status = Status::Error(err, who + "cannot read: " + std::strerror(err));
  } else if (!S_ISREG(st.st_mode)) {
    status = Status::Invalid(who + "not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = Status::Invalid(who + "too large (" + std::to_string(st.st_size) + " bytes; at most " +
                             std::to_string(max_bytes) + ")");
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        status = Status::Error(err, who + "cannot read: " + std::strerror(err));
        break;
      }
      if (n == 0) break;  // shrank meanwhile: what is there
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return bytes;
}

}  // namespace kvfs
