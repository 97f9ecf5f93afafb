#include "server/peer_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace kvserve::server {

bool socket_endpoint(int fd, bool peer, std::string* host, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return false;
  char h[NI_MAXHOST];
  char s[NI_MAXSERV];
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
  // Same rendering as httplib's get_ip_and_port (getnameinfo, NI_NUMERICHOST).
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, h, sizeof h, s, sizeof s, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(s);
  return true;
}

PeerWatch::PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    std::string h;
    int p = 0;
    // Ports first: they are cheap to compare and almost always decide.
    if (!socket_endpoint(int(fd), true, &h, &p) || p != remote_port || h != remote_addr) continue;
    if (!socket_endpoint(int(fd), false, &h, &p) || p != local_port || h != local_addr) continue;
    fd_ = int(fd);
    break;
  }
  closedir(dir);
}

bool PeerWatch::peer_closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, short(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace kvserve::server
