// Noticing that the client of a non-streamed request went away while its handler waits.
//
// cpp-httplib 0.11.4 gives a handler no access to its connection (no
// Request::is_connection_closed, no socket). A TCP connection is identified by its address
// 4-tuple, which httplib does copy into the Request (local_addr/port, remote_addr/port), so
// the handler finds its own socket by matching getsockname/getpeername of the process's open
// descriptors against that tuple: exactly one connected socket can have it. The descriptor
// stays valid while the handler runs (httplib closes it only after the handler returns).
//
// Peer closed = poll() reports POLLRDHUP, POLLHUP or POLLERR. Unread bytes (a pipelined next
// request) only set POLLIN and count as alive; nothing is read from the socket.
#pragma once

#include <string>

namespace kvserve::server {

class PeerWatch {
 public:
  // Finds the connected socket whose local end is local_addr:local_port and remote end
  // remote_addr:remote_port (numeric addresses as httplib writes them). Not found (should not
  // happen): valid() is false and peer_closed() always answers false.
  PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // True once the client closed or reset its end. Never blocks.
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

// The numeric host and port of a socket's local (peer = false) or remote end; false when the
// descriptor is not an IPv4/IPv6 socket or not connected.
bool socket_endpoint(int fd, bool peer, std::string* host, int* port);

}  // namespace kvserve::server
