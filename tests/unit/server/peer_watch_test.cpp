// PeerWatch finds a connection's socket from its address tuple and tells a closed peer from an
// idle or a talking one; the httplib test checks the tuple as httplib 0.11.4 fills it in.
#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kvserve::server {
namespace {

using namespace std::chrono_literals;

// A listening socket on 127.0.0.1 (any port).
int listen_local(int* port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(s, 4), 0);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return s;
}

int connect_local(int port) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return c;
}

// Polls `cond` for up to 5 s (the peer's FIN arrives asynchronously, though at once on loopback).
template <class F>
bool eventually(F cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

TEST(PeerWatch, FindsTheAcceptedSocketAndSeesTheClientClose) {
  int port = 0;
  int lsn = listen_local(&port);
  int cli = connect_local(port);
  int srv = accept(lsn, nullptr, nullptr);
  ASSERT_GE(srv, 0);
  std::string host;
  int cport = 0;
  ASSERT_TRUE(socket_endpoint(cli, false, &host, &cport));
  EXPECT_EQ(host, "127.0.0.1");

  PeerWatch w("127.0.0.1", port, "127.0.0.1", cport);
  ASSERT_TRUE(w.valid());
  EXPECT_EQ(w.fd(), srv);  // not the client's end, whose tuple is the mirror image
  EXPECT_FALSE(w.peer_closed());
  ASSERT_EQ(write(cli, "GET", 3), 3);  // unread bytes (a pipelined request) are not a close
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(w.peer_closed());
  close(cli);
  EXPECT_TRUE(eventually([&] { return w.peer_closed(); }));
  close(srv);
  close(lsn);
}

TEST(PeerWatch, UnknownTupleIsInvalidAndNeverClosed) {
  PeerWatch w("127.0.0.1", 1, "127.0.0.1", 2);
  EXPECT_FALSE(w.valid());
  EXPECT_FALSE(w.peer_closed());
  PeerWatch none("", -1, "", -1);
  EXPECT_FALSE(none.valid());
}

TEST(PeerWatch, SeesAnHttplibClientGoAwayDuringTheHandler) {
  httplib::Server svr;
  std::atomic<int> found{-1};    // 1: the handler found its socket
  std::atomic<int> noticed{-1};  // 1: it saw the client close
  svr.Get("/wait", [&](const httplib::Request& req, httplib::Response& res) {
    PeerWatch w(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    found = w.valid() ? 1 : 0;
    noticed = eventually([&] { return w.peer_closed(); }) ? 1 : 0;
    res.set_content("late", "text/plain");
  });
  int port = svr.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread th([&] { svr.listen_after_bind(); });
  int cli = connect_local(port);
  const std::string rq = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(cli, rq.data(), rq.size()), ssize_t(rq.size()));
  ASSERT_TRUE(eventually([&] { return found.load() != -1; }));
  EXPECT_EQ(found.load(), 1);
  EXPECT_EQ(noticed.load(), -1);  // still waiting: the client is connected
  close(cli);
  EXPECT_TRUE(eventually([&] { return noticed.load() != -1; }));
  EXPECT_EQ(noticed.load(), 1);
  svr.stop();
  th.join();
}

}  // namespace
}  // namespace kvserve::server
